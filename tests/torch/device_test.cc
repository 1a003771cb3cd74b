// What of the CUDA support can be checked without a GPU (the GPU checks are in gpu/): the
// local rank -> device mapping, the device messages, Work::synchronize on CPU tensors.
#include "tdist/torch/device.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>

#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "torch/collectives_test_util.h"

namespace tdist::torch::device_test {
namespace {

using ::torch::Tensor;

TEST(LocalDeviceTest, LocalRankModuloTheDevicesAsTorchrunUsersDo) {
  EXPECT_EQ(detail::local_device(4, "", ""), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(detail::local_device(4, "", "1"), c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(detail::local_device(4, "", "6"), c10::Device(c10::kCUDA, 2));
  EXPECT_EQ(detail::local_device(1, "", "3"), c10::Device(c10::kCUDA, 0));
  // TDIST_LOCAL_RANK wins over LOCAL_RANK.
  EXPECT_EQ(detail::local_device(8, "5", "1"), c10::Device(c10::kCUDA, 5));
}

TEST(LocalDeviceTest, BadRanksAndNoDeviceAreClearErrors) {
  try {
    detail::local_device(2, "", "one");
    FAIL() << "a non-numeric LOCAL_RANK was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_RANK='one' is not a non-negative integer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(detail::local_device(2, "-1", ""), InvalidArgument);
  try {
    detail::local_device(0, "", "0");
    FAIL() << "a device was chosen among none";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos)
        << e.what();
  }
  if (::torch::cuda::device_count() == 0) {
    EXPECT_THROW(local_device(), Error);
  }
}

TEST(DeviceTest, CpuWorkSynchronizesAndWaits) {
  coll_test::run_world(2, [](int rank, const coll_test::PG& pg) {
    Tensor t = ::torch::full({16}, rank + 1.0);
    WorkPtr w = all_reduce_async(t, ReduceOpKind::kSum, pg);
    w->synchronize();
    EXPECT_TRUE(w->is_completed());
    w->wait();  // CPU tensors: the same as synchronize()
    EXPECT_TRUE(::torch::equal(t, ::torch::full({16}, 3.0)));
  });
}

TEST(DeviceTest, MetaTensorsAreRefusedNamingTheDevice) {
  coll_test::ThreadWorld world(1);
  ASSERT_TRUE(world.ok());
  Tensor meta = ::torch::empty({4}, ::torch::TensorOptions().device(c10::kMeta));
  Tensor cpu = ::torch::ones({4});
  for (auto call : {+[](const Tensor&a, const Tensor&, const coll_test::PG&pg) {
                      all_reduce(a, ReduceOpKind::kSum, pg);
                    },
                    +[](const Tensor&a, const Tensor&b, const coll_test::PG&pg) {
                      all_gather_into_tensor(b, a, pg);
                    }}) {
    try {
      call(meta, cpu, world.shared(0));
      FAIL() << "a meta tensor was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("(tensor on meta); move it to the CPU"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tdist::torch::device_test
