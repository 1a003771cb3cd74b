// OpQueue and QueuedWork (op_queue.h).
#include "pg/op_queue.h"

#include "core/coarse_clock.h"
#include "core/polling.h"

namespace tdist::pg {
namespace {

using std::chrono::steady_clock;

// While operations come in, the worker looks at the queue this often on its own (a push
// does not wake it); after kLinger without any, it sleeps until a push wakes it.
constexpr auto kTick = std::chrono::milliseconds(1);
constexpr auto kLinger = std::chrono::seconds(1);

}  // namespace

OpQueue::OpQueue(std::chrono::microseconds claim_delay, std::chrono::milliseconds longest_op)
    : claim_delay_(claim_delay), longest_op_(longest_op), worker_([this] { run_worker(); }) {}

OpQueue::~OpQueue() { stop(); }

void OpQueue::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OpQueue::push(uint64_t seq, std::shared_ptr<QueuedWork> work) {
  bool wake = false;
  {
    MutexLock lock(mu_);
    // Coarse (a tick early at most): the worker may then claim an operation up to a tick
    // sooner, which only costs a hand-off now and then.
    const auto now = core::coarse_now();
    queue_.push_back(Task{seq, std::move(work), now});
    last_push_ = now;
    // A ticking worker finds the task by itself: no wake-up (a futex wake and a context
    // switch, more than the whole of a small collective) on the path of a caller that
    // runs its operation itself.
    wake = worker_idle_ || claim_delay_.count() == 0;
  }
  if (wake) cv_.notify_one();
}

void OpQueue::run_front_locked() {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  {
    MutexUnlock unlocked(mu_);
    task.work->run(task.seq);
  }
  ran_locked();
}

void OpQueue::ran_locked() {
  running_ = false;
  // Callers waiting to run their own operation; the worker when more is queued.
  if (run_waiters_ > 0 || stopping_ || (!queue_.empty() && worker_idle_)) cv_.notify_all();
}

bool OpQueue::reserve() {
  MutexLock lock(mu_);
  if (running_ || stopping_ || !queue_.empty()) return false;
  running_ = true;
  return true;
}

void OpQueue::release() {
  MutexLock lock(mu_);
  ran_locked();
}

void OpQueue::run_worker() {
  const core::BackgroundThread background;  // never polls: it serves work nobody waits on
  MutexLock lock(mu_);
  for (;;) {
    if (queue_.empty() && stopping_) return;  // drained
    const auto now = steady_clock::now();
    if (!running_ && !queue_.empty()) {
      // A caller that waits at once runs its operation itself, without a hand-off: leave a
      // new operation alone for claim_delay_ (unless stopping).
      const auto ready = queue_.front().queued + claim_delay_;
      if (stopping_ || now >= ready) {
        run_front_locked();
      } else {
        cv_.wait_until(mu_, ready);
      }
      continue;
    }
    if (now - last_push_ < kLinger) {
      cv_.wait_for(mu_, kTick);
    } else {
      worker_idle_ = true;
      cv_.wait(mu_);
      worker_idle_ = false;
    }
  }
}

bool OpQueue::queued_locked(const Work* work) const {
  for (const Task& t : queue_) {
    if (t.work.get() == work) return true;
  }
  return false;
}

void OpQueue::run_until(const Work* work) {
  MutexLock lock(mu_);
  // An operation running on another thread comes first (order); then this caller runs
  // the queue up to its own, unless the worker took that meanwhile.
  while (queued_locked(work)) {
    if (running_) {
      ++run_waiters_;
      while (running_ && queued_locked(work)) cv_.wait(mu_);
      --run_waiters_;
      continue;
    }
    run_front_locked();
  }
}

void QueuedWork::poll(Deadline deadline) {
  auto group = group_.lock();
  if (!group) return;
  if (reserved_.load(std::memory_order_acquire) && reserved_.exchange(false)) {
    {
      const WaitsAtOnce off(false);  // what the operation's code issues is not the caller's
      run(reserved_seq_);
    }
    queue_->release();
    return;
  }
  if (deadline.is_never() || deadline.remaining() >= queue_->longest_op()) {
    queue_->run_until(this);
  }
}

}  // namespace tdist::pg
