// coarse_clock.h: the coarse clock is steady_clock's clock, behind it by at most a tick;
// a coarse deadline is within a tick of Deadline::after's.
#include "core/coarse_clock.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tdist::core {
namespace {

TEST(CoarseClockTest, LagsTheSteadyClockByAtMostATick) {
  const Clock::duration tick = coarse_tick();
  ASSERT_GT(tick, Clock::duration::zero());
  EXPECT_LE(tick, std::chrono::milliseconds(100));
  for (int i = 0; i < 1000; ++i) {
    const Clock::time_point before = Clock::now();
    const Clock::time_point coarse = coarse_now();
    const Clock::time_point after = Clock::now();
    EXPECT_LE(coarse, after);
    // A tick late at most (10 here: a busy machine may delay the kernel's update); a
    // different clock would be off by the machine's uptime or more.
    EXPECT_GT(coarse + 10 * tick, before) << "the coarse clock is a different clock";
  }
}

TEST(CoarseClockTest, CoarseDeadlineIsNeverEarlier) {
  const auto timeout = std::chrono::seconds(5);
  const Deadline fine = Deadline::after(timeout);
  const Deadline coarse = coarse_deadline_after(timeout);
  const Deadline fine_later = Deadline::after(timeout);
  EXPECT_GE(coarse.time() + coarse_tick(), fine.time());  // (see above: the kernel's update)
  EXPECT_LE(coarse.time(), fine_later.time() + coarse_tick());
}

TEST(CoarseClockTest, NegativeOrHugeTimeoutsNeverExpire) {
  EXPECT_TRUE(coarse_deadline_after(std::chrono::seconds(-1)).is_never());
  EXPECT_TRUE(coarse_deadline_after(std::chrono::hours(24 * 365 * 200)).is_never());
  EXPECT_FALSE(coarse_deadline_after(std::chrono::seconds(0)).is_never());
}

}  // namespace
}  // namespace tdist::core
