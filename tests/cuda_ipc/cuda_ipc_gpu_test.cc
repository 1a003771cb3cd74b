// The cuda_ipc backend on a GPU (CTest label `gpu`, run by scripts/gpu_check.sh only):
// several ranks as processes on ONE device (this binary with --worker, meeting through a
// FileStore; LOCAL_RANK modulo the device count puts them all on device 0 of a one-GPU
// machine). Each runs nccl_gpu_checks.h's checks (every collective x dtype x op, bitwise
// ops included, in place and not, against a host reference; point-to-point; async Work;
// sub-groups), then cuda_ipc's own: a freed buffer whose address a new allocation reuses,
// and the Work's CUDA event. With 2, 4 and 8 processes. A SIGKILLed rank: the survivors'
// collective fails with PeerError (no hang: the test has a timeout).
// `--count-devices` prints the number of devices the CUDA runtime sees.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "nccl/nccl_gpu_checks.h"
#include "support/local_ranks.h"
#include "tdist/backend.h"
#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "tdist/prefix_store.h"
#include "tdist/process_group.h"

namespace tdist::nccl_gpu_test {
namespace {

using namespace std::chrono_literals;

// A buffer freed after use and a new one allocated (CUDA's allocator hands the same
// address back): the receivers' cached views must not show the old allocation.
void check_address_reuse(ProcessGroup& pg, Report& rep) {
  const size_t n = 1 << 16;
  for (int round = 0; round < 4; ++round) {
    std::vector<int32_t> host(n, pg.rank() + round);
    std::vector<uint8_t> bytes(n * 4);
    std::memcpy(bytes.data(), host.data(), bytes.size());
    DeviceBuffer buf(bytes);
    pg.all_reduce(buf.get(), n, DType::kI32, ReduceOpKind::kSum)->wait();
    const std::vector<uint8_t> got = buf.download();
    int32_t expect = 0;
    for (int q = 0; q < pg.size(); ++q) expect += q + round;
    int32_t first = 0;
    std::memcpy(&first, got.data(), 4);
    rep.expect(first == expect, "address reuse round " + std::to_string(round) + ": got " +
                                    std::to_string(first) + ", expected " + std::to_string(expect));
  }
}

void check_device_work(ProcessGroup& pg, Report& rep) {
  DeviceBuffer buf(4096);
  cudaStream_t caller = nullptr;
  cuda(cudaStreamCreate(&caller), "cudaStreamCreate");
  WorkPtr work;
  {
    CallerStream scope(caller);
    work = pg.all_reduce(buf.get(), 1024, DType::kF32, ReduceOpKind::kSum);
  }
  work->wait();
  auto* device_work = dynamic_cast<DeviceWork*>(work.get());
  rep.expect(device_work != nullptr && device_work->cuda_event() != nullptr,
             "a collective's Work is a DeviceWork with an event");
  if (device_work != nullptr && device_work->cuda_event() != nullptr) {
    cuda(cudaStreamWaitEvent(caller, static_cast<cudaEvent_t>(device_work->cuda_event()), 0),
         "cudaStreamWaitEvent");
    cuda(cudaStreamSynchronize(caller), "cudaStreamSynchronize");
  }
  cuda(cudaStreamDestroy(caller), "cudaStreamDestroy");
  rep.expect(pg.memory_kinds() == memory_bit(MemoryKind::kCuda), "memory_kinds() is kCuda");
}

int worker(int rank, int world, const std::string& store_path, bool victim) {
  try {
    auto store = std::make_shared<FileStore>(store_path, world);
    auto pg = backend_factory("cuda_ipc")(store, rank, world, 120s);
    if (victim) {
      DeviceBuffer buf(1 << 20);
      pg->barrier()->wait();
      if (rank == world - 1) ::raise(SIGKILL);
      try {
        pg->all_reduce(buf.get(), 1 << 18, DType::kF32, ReduceOpKind::kSum)->wait();
        std::cerr << "rank " << rank << ": the all_reduce with a killed rank succeeded\n";
        return 1;
      } catch (const PeerError& e) {
        std::cerr << "rank " << rank << " (expected): " << e.what() << "\n";
        return 0;
      }
    }
    Report rep = check_all(*pg, /*bitwise_ops=*/true);
    check_address_reuse(*pg, rep);
    check_device_work(*pg, rep);
    pg.reset();
    for (const std::string& f : rep.failures) std::cerr << "rank " << rank << ": " << f << "\n";
    return rep.failures.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << " threw: " << e.what() << "\n";
    return 2;
  }
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Runs `world` workers; returns their wait statuses (-1: killed by the test's deadline).
std::vector<int> run_workers(int world, bool victim) {
  return test_support::run_local_ranks(
      world,
      [&](int r, const std::string& store) {
        return std::vector<std::string>{victim ? "--victim" : "--worker", std::to_string(r),
                                        std::to_string(world), store};
      },
      420s);
}

void expect_all_passed(int world) {
  ASSERT_GT(device_count(), 0) << "no CUDA device: scripts/gpu_check.sh runs this only on a GPU";
  const std::vector<int> statuses = run_workers(world, false);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(test_support::exited_zero(statuses[r]))
        << "rank " << r << " of " << world << " failed (status " << statuses[r]
        << "); its stderr says why";
  }
}

TEST(CudaIpcGpu, EveryCollectiveWithTwoProcessesOnOneGpu) { expect_all_passed(2); }
TEST(CudaIpcGpu, EveryCollectiveWithFourProcessesOnOneGpu) { expect_all_passed(4); }
TEST(CudaIpcGpu, EveryCollectiveWithEightProcessesOnOneGpu) { expect_all_passed(8); }

TEST(CudaIpcGpu, ASigkilledRankFailsTheOthersWithPeerError) {
  ASSERT_GT(device_count(), 0) << "no CUDA device: scripts/gpu_check.sh runs this only on a GPU";
  constexpr int kWorld = 3;
  const std::vector<int> statuses = run_workers(kWorld, true);
  EXPECT_TRUE(statuses[kWorld - 1] >= 0 && WIFSIGNALED(statuses[kWorld - 1]));
  for (int r = 0; r < kWorld - 1; ++r) {
    EXPECT_TRUE(test_support::exited_zero(statuses[r]))
        << "rank " << r << " (status " << statuses[r] << "): its stderr says why";
  }
}

}  // namespace
}  // namespace tdist::nccl_gpu_test

int main(int argc, char** argv) {
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
  if (argc == 5 && (std::string(argv[1]) == "--worker" || std::string(argv[1]) == "--victim")) {
    return tdist::nccl_gpu_test::worker(std::stoi(argv[2]), std::stoi(argv[3]), argv[4],
                                        std::string(argv[1]) == "--victim");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
