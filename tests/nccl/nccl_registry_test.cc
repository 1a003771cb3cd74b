// The nccl backend's registration, in one process on a machine without a GPU (CI): with
// CUDA and NCCL built in, "nccl" is registered and making a group, through the registry or
// init_process_group, fails at once with a clear Error when no device is visible; without
// them, asking for it says how to enable it. On a machine with a GPU the creation cases
// skip (gpu_check.sh runs the GPU tests there).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "tdist/backend.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#if TDIST_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace tdist {
namespace {

using namespace std::chrono_literals;

#if TDIST_HAVE_NCCL
// Whether the CUDA runtime sees a device here.
bool gpu_visible() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(NcclRegistryTest, NcclIsRegistered) {
  EXPECT_TRUE(has_backend("nccl"));
  EXPECT_TRUE(has_backend("NCCL"));
}

TEST(NcclRegistryTest, CreatingAGroupWithoutADeviceIsAClearError) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA device is visible: scripts/gpu_check.sh tests it";
  const auto start = std::chrono::steady_clock::now();
  try {
    backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 30s);
    FAIL() << "made an nccl group without a CUDA device";
  } catch (const InvalidArgument& e) {
    FAIL() << "InvalidArgument instead of Error: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("nccl: no CUDA device is visible: ", 0), 0u) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // no wait for peers or devices
}

TEST(NcclRegistryTest, InitProcessGroupWithoutADeviceIsAClearError) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA device is visible: scripts/gpu_check.sh tests it";
  try {
    init_process_group("nccl", "", 1, 0, 30s, std::make_shared<HashStore>());
    destroy_process_group();
    FAIL() << "init_process_group(\"nccl\") succeeded without a CUDA device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nccl: no CUDA device is visible: "), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(is_initialized());
}

TEST(NcclRegistryTest, AGroupOfTwoWithoutADeviceFailsOnEveryRankAtOnce) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA device is visible: scripts/gpu_check.sh tests it";
  auto store = std::make_shared<HashStore>();
  for (int rank = 1; rank >= 0; --rank) {  // rank 1 first: it must not wait for rank 0's id
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(backend_factory("nccl")(store, rank, 2, 30s), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  }
}
#else
TEST(NcclRegistryTest, WithoutNcclAskingForItSaysHowToEnableIt) {
  EXPECT_FALSE(has_backend("nccl"));
  try {
    backend_factory("nccl");
    FAIL() << "backend_factory(\"nccl\") did not throw";
  } catch (const InvalidArgument& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("built without CUDA and NCCL"), std::string::npos) << text;
    EXPECT_NE(text.find("-DTDIST_CUDA"), std::string::npos) << text;
  }
}
#endif

}  // namespace
}  // namespace tdist
