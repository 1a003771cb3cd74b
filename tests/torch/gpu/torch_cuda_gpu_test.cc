// The LibTorch layer on CUDA tensors (CTest configuration and label `gpu`, run by
// scripts/gpu_check.sh only; built against a LibTorch with CUDA): every tensor collective x
// dtype, stream semantics and DDP against the CPU, over nccl (a world of one in this
// process; one process per GPU where there are two or more) and over the tcp and shm
// backends' staging through pinned host memory (two processes on one GPU: this binary with
// --worker, the device from LOCAL_RANK through local_device(), meeting through a FileStore).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "support/local_ranks.h"
#include "tdist/backend.h"
#include "tdist/file_store.h"
#include "tdist/hash_store.h"
#include "tdist/torch/device.h"
#include "torch/gpu/torch_cuda_checks.h"

namespace tdist::torch::gpu_test {
namespace {

using namespace std::chrono_literals;

int devices() { return static_cast<int>(::torch::cuda::device_count()); }

void report(const Failures& f) {
  for (const std::string& s : f.list) ADD_FAILURE() << s;
}

PG world1(const std::string& backend) {
  return backend_factory(backend)(std::make_shared<HashStore>(), 0, 1, 60s);
}

TEST(TorchCudaNccl, EveryCollectiveAndDtypeWorld1) {
  ASSERT_GT(devices(), 0);
  Failures f;
  check_collectives(f, world1("nccl"), c10::Device(c10::kCUDA, 0));
  report(f);
}

TEST(TorchCudaNccl, StreamSemanticsWorld1) {
  ASSERT_GT(devices(), 0);
  Failures f;
  check_streams(f, world1("nccl"), c10::Device(c10::kCUDA, 0));
  report(f);
}

TEST(TorchCudaNccl, DdpMatchesCpuWorld1) {
  ASSERT_GT(devices(), 0);
  Failures f;
  check_ddp(f, world1("nccl"), c10::Device(c10::kCUDA, 0));
  report(f);
}

TEST(TorchCudaStaging, StreamSemanticsAndDdpWorld1Tcp) {
  ASSERT_GT(devices(), 0);
  Failures f;
  PG pg = world1("tcp");
  check_streams(f, pg, c10::Device(c10::kCUDA, 0));
  check_ddp(f, pg, c10::Device(c10::kCUDA, 0));
  report(f);
}

TEST(TorchCudaStaging, WrongDeviceIsRefused) {
  if (devices() < 2) GTEST_SKIP() << "needs two GPUs";
  PG pg = world1("tcp");
  Tensor a = ::torch::ones({4}, ::torch::TensorOptions().device(c10::Device(c10::kCUDA, 0)));
  Tensor b = ::torch::ones({4}, ::torch::TensorOptions().device(c10::Device(c10::kCUDA, 1)));
  EXPECT_THROW(all_gather_into_tensor(a, b, pg), InvalidArgument);
}

// `world` processes of this binary run `check` ("collectives", "ddp") over `backend`.
void run_processes(const std::string& backend, int world, const std::string& check) {
  const std::vector<int> statuses = test_support::run_local_ranks(
      world,
      [&](int r, const std::string& store) {
        return std::vector<std::string>{
            "--worker", backend, std::to_string(r), std::to_string(world), store, check};
      },
      400s);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(test_support::exited_zero(statuses[r]))
        << backend << " " << check << ": rank " << r << " failed (status " << statuses[r]
        << ", -1: killed at the deadline); its stderr says why";
  }
}

TEST(TorchCudaStaging, EveryCollectiveAndDtypeTcpTwoProcessesOneGpu) {
  ASSERT_GT(devices(), 0);
  run_processes("tcp", 2, "collectives");
}

TEST(TorchCudaStaging, EveryCollectiveAndDtypeShmTwoProcessesOneGpu) {
  ASSERT_GT(devices(), 0);
  run_processes("shm", 2, "collectives");
}

TEST(TorchCudaStaging, DdpMatchesCpuShmTwoProcessesOneGpu) {
  ASSERT_GT(devices(), 0);
  run_processes("shm", 2, "ddp");
}

TEST(TorchCudaNccl, EveryCollectiveAndDdpOneProcessPerGpu) {
  if (devices() < 2) GTEST_SKIP() << devices() << " GPU(s): NCCL needs one GPU per rank";
  run_processes("nccl", std::min(devices(), 4), "collectives");
  run_processes("nccl", std::min(devices(), 4), "ddp");
}

int worker(const std::string& backend, int rank, int world, const std::string& store_path,
           const std::string& check) {
  try {
    auto store = std::make_shared<FileStore>(store_path, world);
    PG pg = backend_factory(backend)(store, rank, world, 120s);
    const c10::Device device = local_device();
    Failures f;
    if (check == "ddp") {
      check_ddp(f, pg, device);
    } else {
      check_collectives(f, pg, device);
      check_streams(f, pg, device);
    }
    pg.reset();
    for (const std::string& s : f.list) std::cerr << "rank " << rank << ": " << s << "\n";
    return f.list.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << " threw: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace
}  // namespace tdist::torch::gpu_test

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--worker") {
    return tdist::torch::gpu_test::worker(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), argv[5],
                                          argv[6]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
