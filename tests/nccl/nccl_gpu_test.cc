// The nccl backend on a GPU (CTest label `gpu`, run by scripts/gpu_check.sh only): the
// checks of nccl_gpu_checks.h (every collective x dtype x op against a host reference,
// point-to-point, sub-groups, async Work), abort, refused ops and host memory. A world of
// one runs in this process; when the machine has two GPUs or more, the same checks run on
// min(devices, 4) ranks as processes (this binary with --worker, one device each through
// LOCAL_RANK, meeting through a FileStore), with a timeout and an abort that must reach the
// other ranks; with one GPU that case skips, since NCCL refuses two ranks on one device.
// `--count-devices` prints the number of devices the CUDA runtime sees (gpu_check.sh's
// probe).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl_gpu_checks.h"
#include "support/local_ranks.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"
#include "tdist/process_group.h"

namespace tdist::nccl_gpu_test {
namespace {

using namespace std::chrono_literals;

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void require_gpu() {
  ASSERT_GT(device_count(), 0) << "no CUDA device: scripts/gpu_check.sh runs this only on a GPU";
}

TEST(NcclGpuWorld1, EveryCollectiveAndDtypeAgainstAHostReference) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  ASSERT_EQ(pg->backend_name(), "nccl");
  const Report rep = check_all(*pg);
  for (const std::string& f : rep.failures) ADD_FAILURE() << f;
}

TEST(NcclGpuWorld1, AbortFailsLaterOperationsWithPeerError) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  DeviceBuffer buf(1024);
  pg->all_reduce(buf.get(), 256, DType::kF32, ReduceOpKind::kSum)->wait();
  pg->abort();
  WorkPtr work = pg->all_reduce(buf.get(), 256, DType::kF32, ReduceOpKind::kSum);
  try {
    work->wait();
    FAIL() << "an all_reduce after abort succeeded";
  } catch (const PeerError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("rank 0/1 (nccl) all_reduce #1"), std::string::npos) << text;
    EXPECT_NE(text.find("aborted by the user"), std::string::npos) << text;
  }
}

TEST(NcclGpuWorld1, BitwiseOpsAndHostMemoryAreRefusedBeforeAnythingRuns) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  DeviceBuffer buf(64);
  EXPECT_THROW(pg->all_reduce(buf.get(), 16, DType::kI32, ReduceOpKind::kBxor), InvalidArgument);
  // Host memory is refused by name instead of reaching NCCL's kernels.
  std::vector<int32_t> host(16);
  try {
    pg->all_reduce(host.data(), 16, DType::kI32, ReduceOpKind::kSum);
    ADD_FAILURE() << "an all_reduce on host memory was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: send is host memory"), std::string::npos)
        << e.what();
  }
  // The group goes on: the refused call took no sequence number.
  pg->all_reduce(buf.get(), 16, DType::kI32, ReduceOpKind::kMax)->wait();
  pg->barrier()->wait();
}

// ---- several ranks as processes ----

int worker(int rank, int world, const std::string& store_path) {
  try {
    auto store = std::make_shared<FileStore>(store_path, world);
    auto pg = backend_factory("nccl")(store, rank, world, 120s);
    Report rep = check_all(*pg);
    // A rank that skips a collective: its peers' Work ends with TimeoutError after the
    // group's timeout (3 s), through the watchdog.
    auto short_store = std::make_shared<PrefixStore>("short", store);
    auto quick = backend_factory("nccl")(short_store, rank, world, 3s);
    DeviceBuffer buf(4096);
    quick->barrier()->wait();
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      WorkPtr work = quick->all_reduce(buf.get(), 1024, DType::kF32, ReduceOpKind::kSum);
      bool timed_out = false;
      try {
        work->wait();
      } catch (const TimeoutError& e) {
        timed_out = std::string(e.what()).find("all_reduce #1") != std::string::npos;
      }
      rep.expect(timed_out, "the skipped all_reduce did not end with TimeoutError");
      rep.expect(std::chrono::steady_clock::now() - start < 15s, "the timeout took too long");
    } else {
      std::this_thread::sleep_for(6s);
    }
    quick.reset();
    // abort() on rank 0 reaches the others through the group's store: their pending
    // all_reduce ends with PeerError quoting it, within seconds (60 s timeout).
    auto abort_store = std::make_shared<PrefixStore>("abort", store);
    auto doomed = backend_factory("nccl")(abort_store, rank, world, 60s);
    doomed->barrier()->wait();
    if (rank == 0) doomed->abort();
    const auto start = std::chrono::steady_clock::now();
    std::string text;
    try {
      doomed->all_reduce(buf.get(), 1024, DType::kF32, ReduceOpKind::kSum)->wait();
    } catch (const PeerError& e) {
      text = e.what();
    }
    rep.expect(text.find("aborted by the user") != std::string::npos,
               "after rank 0's abort: '" + text + "'");
    rep.expect(rank == 0 || text.find("another rank of the group failed") != std::string::npos,
               "the abort did not come from rank 0's notice: '" + text + "'");
    rep.expect(std::chrono::steady_clock::now() - start < 10s, "the abort took too long");
    doomed.reset();
    pg.reset();
    for (const std::string& f : rep.failures) std::cerr << "rank " << rank << ": " << f << "\n";
    return rep.failures.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << " threw: " << e.what() << "\n";
    return 2;
  }
}

TEST(NcclGpuMultiProcess, EveryCollectiveOnOneGpuPerRank) {
  const int devices = device_count();
  if (devices < 2) GTEST_SKIP() << devices << " CUDA device(s): several ranks need one GPU each";
  const int world = std::min(devices, 4);
  const std::vector<int> statuses = test_support::run_local_ranks(
      world,
      [&](int r, const std::string& store) {
        return std::vector<std::string>{"--worker", std::to_string(r), std::to_string(world),
                                        store};
      },
      400s);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(test_support::exited_zero(statuses[r]))
        << "rank " << r << " failed (status " << statuses[r]
        << ", -1: killed at the deadline); its stderr says why";
  }
}

}  // namespace
}  // namespace tdist::nccl_gpu_test

int main(int argc, char** argv) {
  // scripts/gpu_check.sh's probe: the number of devices, or why there is none (exit 1).
  if (argc == 2 && std::string(argv[1]) == "--count-devices") {
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
      std::cout << cudaGetErrorName(rc) << ": " << cudaGetErrorString(rc) << "\n";
      return 1;
    }
    std::cout << n << "\n";
    return 0;
  }
  if (argc == 5 && std::string(argv[1]) == "--worker") {
    return tdist::nccl_gpu_test::worker(std::stoi(argv[2]), std::stoi(argv[3]), argv[4]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
