// Work (work.h): the completion state of one operation, finished exactly once.
#include "tdist/work.h"

#include <utility>

#include "tdist/error.h"

namespace tdist {

Work::Work(std::string op) : op_(std::move(op)) {}
Work::~Work() = default;

void Work::poll(Deadline /*deadline*/) {}

void Work::wait(Deadline deadline) { synchronize(deadline); }

void Work::synchronize() { synchronize(Deadline::never()); }

void Work::synchronize(Deadline deadline) {
  poll(deadline);
  if (!finished_.load(std::memory_order_acquire)) {
    MutexLock lock(mu_);
    // Counted before the loop reads finished_ (both seq_cst), while finish() sets finished_
    // before it reads watchers_: either it sees this waiter and notifies under mu_, or this
    // waiter sees it finished.
    watchers_.fetch_add(1, std::memory_order_seq_cst);
    auto finished = [this] { return finished_.load(std::memory_order_seq_cst); };
    bool in_time = true;
    while (!finished()) {
      if (deadline.is_never()) {
        cv_.wait(mu_);
      } else if (!cv_.wait_until(mu_, deadline.time())) {
        in_time = finished();
        break;
      }
    }
    watchers_.fetch_sub(1, std::memory_order_relaxed);
    if (!in_time) {
      TDIST_THROW(TimeoutError, op_,
                  ": the deadline given to Work::wait passed; the operation is still running");
    }
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  const_cast<Work*>(this)->poll(Deadline::at(Clock::now()));
  return finished_.load(std::memory_order_acquire);
}

bool Work::is_success() const { return finished_.load(std::memory_order_acquire) && !error_; }

int Work::source_rank() const {
  return is_success() ? source_rank_.load(std::memory_order_relaxed) : -1;
}

std::exception_ptr Work::exception() const {
  return finished_.load(std::memory_order_acquire) ? error_ : nullptr;
}

void Work::add_callback(std::function<void()> fn) {
  {
    MutexLock lock(mu_);
    watchers_.fetch_add(1, std::memory_order_seq_cst);  // as in wait()
    if (!finished_.load(std::memory_order_seq_cst)) {
      callbacks_.push_back(std::move(fn));  // finish() sees watchers_ and runs it
      return;
    }
    watchers_.fetch_sub(1, std::memory_order_relaxed);
  }
  fn();
}

void Work::finish(std::exception_ptr error) {
  if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
  error_ = std::move(error);
  finished_.store(true, std::memory_order_seq_cst);
  if (watchers_.load(std::memory_order_seq_cst) == 0) return;  // nobody to wake or call
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
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
