// Work (work.h): the completion state of one operation, finished exactly once.
#include "tdist/work.h"

#include <utility>

#include "tdist/error.h"

namespace tdist {

Work::Work(std::string op) : op_(std::move(op)) {}
Work::~Work() = default;

void Work::poll(Deadline /*deadline*/) {}

void Work::wait() { wait(Deadline::never()); }

void Work::wait(Deadline deadline) {
  poll(deadline);
  if (finished_.load(std::memory_order_acquire)) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.is_never()) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_until(lock, deadline.time(), [this] { return done_; })) {
    TDIST_THROW(TimeoutError, op_,
                ": the deadline given to Work::wait passed; the operation is still running");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  const_cast<Work*>(this)->poll(Deadline::at(Clock::now()));
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Work::add_callback(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void Work::finish(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    finished_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& fn : callbacks) fn();
}

WorkPtr completed_work(std::string op, std::exception_ptr error) {
  auto work = std::make_shared<Work>(std::move(op));
  work->finish(std::move(error));
  return work;
}

}  // namespace tdist
