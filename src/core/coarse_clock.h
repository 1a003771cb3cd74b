// Coarse steady time for hot paths: stamps and long deadlines that must not cost a full
// clock read (~30 ns under a hypervisor; a small collective reads the clock several times).
// CLOCK_MONOTONIC_COARSE is the clock std::chrono::steady_clock reads on Linux
// (CLOCK_MONOTONIC) as of the kernel's last tick: it costs a few ns and lags by up to one
// tick (coarse_tick(), 1-4 ms).
// Thread-safety: all functions are.
#pragma once

#include <time.h>

#include <chrono>

#include "tdist/deadline.h"

namespace tdist::core {

// The steady clock at the last tick: <= Clock::now(), and > Clock::now() - coarse_tick().
inline Clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

// How far coarse_now() may lag.
inline Clock::duration coarse_tick() {
  static const Clock::duration tick = [] {
    timespec res{};
    ::clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(res.tv_sec) +
                                                       std::chrono::nanoseconds(res.tv_nsec));
  }();
  return tick;
}

// Deadline::after(timeout) from the coarse clock: never earlier than it, at most one tick
// later. For timeouts of seconds, where a few ms do not matter.
inline Deadline coarse_deadline_after(Clock::duration timeout) {
  if (timeout < Clock::duration::zero() || timeout > std::chrono::hours(24 * 365 * 100)) {
    return Deadline::never();
  }
  return Deadline::at(coarse_now() + coarse_tick() + timeout);
}

}  // namespace tdist::core
