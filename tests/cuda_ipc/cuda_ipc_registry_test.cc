// The cuda_ipc backend without a GPU (CI): with CUDA built in, "cuda_ipc" is registered,
// making a group of two ranks (threads) fails at once on both with "cuda_ipc: no CUDA
// device is visible: ..." (neither waits for the other), and the device descriptor's codec
// round-trips and rejects what is not one. Without CUDA, the name is not registered. On a
// machine with a GPU the creation case skips (gpu_check.sh runs the GPU tests there).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#if TDIST_HAVE_CUDA_IPC
#include <cuda_runtime_api.h>

#include "transport/cuda_ipc/descriptor.h"
#endif

namespace tdist {
namespace {

using namespace std::chrono_literals;

#if TDIST_HAVE_CUDA_IPC
bool gpu_visible() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CudaIpcRegistryTest, CudaIpcIsRegistered) { EXPECT_TRUE(has_backend("cuda_ipc")); }

TEST(CudaIpcRegistryTest, TwoRanksWithoutADeviceBothFailAtOnce) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA device is visible: scripts/gpu_check.sh tests it";
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        backend_factory("cuda_ipc")(store, r, 2, 30s);
        errors[r] = "made a cuda_ipc group without a CUDA device";
      } catch (const InvalidArgument& e) {
        errors[r] = std::string("InvalidArgument instead of Error: ") + e.what();
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors) {
    EXPECT_EQ(e.rfind("cuda_ipc: no CUDA device is visible: ", 0), 0u) << e;
  }
}

TEST(CudaIpcDescriptorTest, RoundTripsEveryField) {
  transport::cuda_ipc::IpcDescriptor d;
  for (size_t i = 0; i < transport::cuda_ipc::kHandleBytes; ++i) {
    d.memory[i] = static_cast<uint8_t>(i);
    d.event[i] = static_cast<uint8_t>(255 - i);
  }
  d.base = 0x7f0000000000;
  d.allocation = 64 << 20;
  d.offset = 4096;
  d.bytes = 1 << 20;
  d.slot = 7;
  d.device = 3;
  transport::core::DeviceDescriptor wire;
  transport::cuda_ipc::encode(d, &wire);
  transport::cuda_ipc::IpcDescriptor back;
  ASSERT_EQ(transport::cuda_ipc::decode(wire, &back), "");
  EXPECT_EQ(std::memcmp(back.memory, d.memory, sizeof(d.memory)), 0);
  EXPECT_EQ(std::memcmp(back.event, d.event, sizeof(d.event)), 0);
  EXPECT_EQ(back.base, d.base);
  EXPECT_EQ(back.allocation, d.allocation);
  EXPECT_EQ(back.offset, d.offset);
  EXPECT_EQ(back.bytes, d.bytes);
  EXPECT_EQ(back.slot, d.slot);
  EXPECT_EQ(back.device, d.device);
}

TEST(CudaIpcDescriptorTest, RejectsWhatIsNoDescriptor) {
  transport::core::DeviceDescriptor zeros;
  transport::cuda_ipc::IpcDescriptor d;
  EXPECT_NE(transport::cuda_ipc::decode(zeros, &d).find("magic"), std::string::npos);
  transport::cuda_ipc::IpcDescriptor outside;
  outside.allocation = 1024;
  outside.offset = 512;
  outside.bytes = 513;  // one byte past the allocation
  transport::core::DeviceDescriptor wire;
  transport::cuda_ipc::encode(outside, &wire);
  EXPECT_NE(transport::cuda_ipc::decode(wire, &d).find("places 513 bytes at offset 512"),
            std::string::npos);
}
#else
TEST(CudaIpcRegistryTest, NotRegisteredWithoutCuda) { EXPECT_FALSE(has_backend("cuda_ipc")); }
#endif

}  // namespace
}  // namespace tdist
