// The one rule for a process's CUDA device (core/device_choice.h), which the nccl and
// cuda_ipc backends and tdist::torch::local_device() share: TDIST_NCCL_DEVICE, else the local
// rank (TDIST_LOCAL_RANK, else LOCAL_RANK) modulo the device count, else 0. No GPU needed.
#include "core/device_choice.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "support/expect_invalid.h"
#include "support/scoped_env.h"
#include "tdist/error.h"

namespace tdist {
namespace {

using test_support::ScopedEnv;

DeviceChoice given(int64_t device, std::string local_rank) {
  DeviceChoice choice;
  choice.device = device;
  choice.local_rank = std::move(local_rank);
  return choice;
}

TEST(DeviceChoiceTest, TheSettingThenTheLocalRankThenZero) {
  EXPECT_EQ(choose_device(4, given(-1, ""), "nccl"), 0);
  EXPECT_EQ(choose_device(4, given(-1, "3"), "nccl"), 3);
  EXPECT_EQ(choose_device(4, given(-1, "6"), "nccl"), 2);  // modulo the device count
  EXPECT_EQ(choose_device(1, given(-1, "7"), "nccl"), 0);
  EXPECT_EQ(choose_device(4, given(1, "3"), "nccl"), 1);  // the setting wins
  EXPECT_EQ(choose_device(4, given(0, "3"), "nccl"), 0);
}

TEST(DeviceChoiceTest, ADeviceThatIsNotVisibleOrABadLocalRankIsInvalidArgument) {
  EXPECT_INVALID(choose_device(2, given(2, ""), "nccl"),
                 "nccl: TDIST_NCCL_DEVICE=2 but only 2 CUDA devices are visible (0..1)");
  EXPECT_INVALID(choose_device(1, given(3, ""), "cuda_ipc"),
                 "cuda_ipc: TDIST_NCCL_DEVICE=3 but only 1 CUDA device is visible");
  for (const char* bad : {"-1", "x", "1x", " 1"}) {
    const std::string want =
        std::string("nccl: LOCAL_RANK='") + bad + "' is not a non-negative integer (hint)";
    EXPECT_INVALID(choose_device(2, given(-1, bad), "nccl", " (hint)"), want.c_str());
  }
}

TEST(DeviceChoiceTest, TheEnvironmentGivesTdistLocalRankBeforeLocalRank) {
  {
    ScopedEnv device("TDIST_NCCL_DEVICE", std::nullopt);
    ScopedEnv own("TDIST_LOCAL_RANK", std::nullopt);
    ScopedEnv local("LOCAL_RANK", "5");
    EXPECT_EQ(choose_device(2, device_choice_from_env(), "nccl"), 1);
  }
  {
    ScopedEnv device("TDIST_NCCL_DEVICE", "1");
    ScopedEnv local("LOCAL_RANK", "0");
    EXPECT_EQ(choose_device(2, device_choice_from_env(), "nccl"), 1);
  }
  {
    ScopedEnv device("TDIST_NCCL_DEVICE", std::nullopt);
    ScopedEnv own("TDIST_LOCAL_RANK", "bad");
    ScopedEnv local("LOCAL_RANK", "0");
    EXPECT_INVALID(choose_device(8, device_choice_from_env(), "nccl"), "TDIST_LOCAL_RANK='bad'");
  }
  {
    ScopedEnv device("TDIST_NCCL_DEVICE", std::nullopt);
    ScopedEnv own("TDIST_LOCAL_RANK", std::nullopt);
    ScopedEnv local("LOCAL_RANK", std::nullopt);
    EXPECT_EQ(choose_device(8, device_choice_from_env(), "nccl"), 0);
  }
  {
    ScopedEnv device("TDIST_NCCL_DEVICE", "-2");  // outside the declared range
    EXPECT_THROW(device_choice_from_env(), InvalidArgument);
  }
}

}  // namespace
}  // namespace tdist
