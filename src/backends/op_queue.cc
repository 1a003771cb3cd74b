// OpQueue and QueuedWork (op_queue.h).
#include "backends/op_queue.h"

namespace tdist::backends {

OpQueue::OpQueue(std::chrono::microseconds claim_delay, std::chrono::milliseconds longest_op)
    : claim_delay_(claim_delay), longest_op_(longest_op), worker_([this] { run_worker(); }) {}

OpQueue::~OpQueue() { stop(); }

void OpQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OpQueue::push(uint64_t seq, WorkPtr work, Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Task{seq, std::move(work), std::move(op), std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
}

void OpQueue::run_front(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  task.op(task.seq);
  lock.lock();
  running_ = false;
}

void OpQueue::run_worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !running_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stopping and drained
    // A caller that waits at once runs its operation itself, without a hand-off: leave a
    // new operation alone for claim_delay_ (unless stopping).
    const uint64_t seq = queue_.front().seq;
    const auto ready = queue_.front().queued + claim_delay_;
    if (!stopping_ && std::chrono::steady_clock::now() < ready) {
      cv_.wait_until(lock, ready, [&] {
        return stopping_ || running_ || queue_.empty() || queue_.front().seq != seq;
      });
      continue;  // look again: a caller may have taken it or be running something
    }
    run_front(lock);
  }
}

void OpQueue::run_until(const Work* work) {
  std::unique_lock<std::mutex> lock(mu_);
  auto queued = [&] {
    for (const Task& t : queue_) {
      if (t.work.get() == work) return true;
    }
    return false;
  };
  while (!running_ && queued()) run_front(lock);
  const bool more = !queue_.empty() || stopping_;
  lock.unlock();
  if (more) cv_.notify_all();  // the worker may be waiting for running_ to clear
}

void QueuedWork::poll(Deadline deadline) {
  auto group = group_.lock();
  if (!group) return;
  if (deadline.is_never() || deadline.remaining() >= queue_->longest_op()) {
    queue_->run_until(this);
  }
}

}  // namespace tdist::backends
