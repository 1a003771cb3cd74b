// Deadline: a point in steady time by which a blocking call must finish.
// Every blocking tdist call takes one (or derives it from a timeout). Value type.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>

namespace tdist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class Deadline {
 public:
  // A deadline `timeout` from now. A negative or huge timeout never expires.
  static Deadline after(Clock::duration timeout) {
    if (timeout < Clock::duration::zero() || timeout > std::chrono::hours(24 * 365 * 100)) {
      return never();
    }
    return Deadline(Clock::now() + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline at(Clock::time_point t) { return Deadline(t); }

  Clock::time_point time() const { return at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= at_; }

  // Time left, zero once expired.
  milliseconds remaining() const {
    if (is_never()) return milliseconds::max();
    auto left = std::chrono::ceil<milliseconds>(at_ - Clock::now());
    return std::max(left, milliseconds::zero());
  }

  // Timeout argument for poll/epoll_wait: -1 for never, else remaining ms (clamped).
  int poll_timeout_ms() const {
    if (is_never()) return -1;
    return static_cast<int>(std::min<long long>(remaining().count(), INT_MAX));
  }

  // The earlier of two deadlines.
  static Deadline earliest(Deadline a, Deadline b) { return a.at_ <= b.at_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point t) : at_(t) {}
  Clock::time_point at_;
};

}  // namespace tdist
