// OpQueue: how the built-in process groups run their collectives: one at a time, in the
// order they were issued (each with the group's sequence number), by the group's worker
// thread, or by a caller that waits for one, which then runs the queue up to it itself
// (so the common `all_reduce(...)->wait()` costs no hand-off between threads).
// QueuedWork is the Work of such an operation, and the operation itself (run(); one
// allocation holds both, QueuedCall for a callable): waiting on it helps run the queue.
//
// claim_delay: how long the worker leaves a newly queued operation to a caller that may
// wait on it at once (0: the worker takes it at once). A push does not wake the worker
// while operations keep coming: the worker then looks at the queue every millisecond by
// itself, so a caller that runs its own operation pays no wake-up; after a second with no
// push it sleeps until the next push wakes it (an idle group costs no CPU). An operation
// nobody waits on thus starts within claim_delay plus a millisecond. The worker is a
// background thread (core/polling.h): it sleeps while it waits; a caller running its
// own operation may poll. longest_op: how long one operation can block; a caller helps
// only when it is willing to wait that long (operations cannot stop at a caller's shorter
// deadline), else it just sleeps until the Work finishes.
// Thread-safety: push and run_until may be called from any thread. Operations must finish
// their Work (an exception escaping one is a bug: std::terminate). Destruction (or stop())
// lets queued operations finish, then joins the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "tdist/device.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"
#include "tdist/work.h"

namespace tdist::pg {

class QueuedWork;

class OpQueue {
 public:
  OpQueue(std::chrono::microseconds claim_delay, std::chrono::milliseconds longest_op);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `work`, the group's operation number `seq` (ProcessGroup numbers them; pushes
  // come in increasing seq order), which runs as work->run(seq) and finishes itself.
  void push(uint64_t seq, std::shared_ptr<QueuedWork> work) TDIST_EXCLUDES(mu_);
  // Runs queued operations on the calling thread, in order, until `work`'s has run. When
  // another thread is running one, waits for it to end first; returns as soon as `work`'s
  // operation is no longer queued (this thread ran it, or another took it).
  void run_until(const Work* work) TDIST_EXCLUDES(mu_);
  // For a caller that waits at once (WaitsAtOnce): when nothing is queued or running,
  // marks an operation running (later pushes queue behind it) and returns true; the caller
  // then runs its operation itself and calls release(). False: push as usual.
  bool reserve() TDIST_EXCLUDES(mu_);
  void release() TDIST_EXCLUDES(mu_);
  // Lets queued operations finish and joins the worker; idempotent.
  void stop() TDIST_EXCLUDES(mu_);

  std::chrono::milliseconds longest_op() const { return longest_op_; }

 private:
  struct Task {
    uint64_t seq;
    std::shared_ptr<QueuedWork> work;
    std::chrono::steady_clock::time_point queued;
  };

  void run_worker() TDIST_EXCLUDES(mu_);
  // Pops the front task and runs it with mu_ released.
  void run_front_locked() TDIST_REQUIRES(mu_);
  // An operation stopped running: wakes whoever waits for that.
  void ran_locked() TDIST_REQUIRES(mu_);
  // Whether `work`'s operation is still queued.
  bool queued_locked(const Work* work) const TDIST_REQUIRES(mu_);

  const std::chrono::microseconds claim_delay_;
  const std::chrono::milliseconds longest_op_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ TDIST_GUARDED_BY(mu_);
  bool stopping_ TDIST_GUARDED_BY(mu_) = false;
  bool running_ TDIST_GUARDED_BY(mu_) = false;  // an operation is executing
  // Callers of run_until waiting for running_ to clear.
  int run_waiters_ TDIST_GUARDED_BY(mu_) = 0;
  // The worker sleeps until woken (no tick).
  bool worker_idle_ TDIST_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_push_ TDIST_GUARDED_BY(mu_);
  std::thread worker_;
};

// The Work of an operation on an OpQueue owned by `group`, and the operation.
// A queued operation's Work. On a device group (comm_device.h) its DeviceWork event is
// set once, before it finishes.
class QueuedWork : public Work, public DeviceWork {
 public:
  QueuedWork(const char* op, std::weak_ptr<ProcessGroup> group, OpQueue& queue)
      : Work(op), group_(std::move(group)), queue_(&queue) {}

  void* cuda_event() const override { return event_.load(std::memory_order_acquire); }
  // Keeps `event` (a cudaEvent_t's owner) with the Work; call before finish().
  void set_cuda_event(std::shared_ptr<void> event) {
    event_owner_ = std::move(event);
    event_.store(event_owner_.get(), std::memory_order_release);
  }

  // Runs the operation, numbered `seq`; it must finish this Work (and not throw). The
  // queue calls it once.
  virtual void run(uint64_t seq) = 0;
  // Instead of pushing it: the queue was reserved for this operation, numbered `seq`
  // (OpQueue::reserve), which the first poll runs, on whichever thread polls, then
  // releases the queue.
  void run_on_poll(uint64_t seq) {
    reserved_seq_ = seq;
    reserved_.store(true, std::memory_order_release);
  }

 protected:
  void poll(Deadline deadline) override;

 private:
  std::weak_ptr<ProcessGroup> group_;  // keeps queue_ alive while locked
  OpQueue* queue_;
  std::atomic<bool> reserved_{false};  // run_on_poll: this Work's operation holds the queue
  uint64_t reserved_seq_ = 0;
  std::shared_ptr<void> event_owner_;
  std::atomic<void*> event_{nullptr};
};

// A QueuedWork whose operation is `fn(seq, work)`.
template <typename Fn>
class QueuedCall final : public QueuedWork {
 public:
  QueuedCall(const char* op, std::weak_ptr<ProcessGroup> group, OpQueue& queue, Fn fn)
      : QueuedWork(op, std::move(group), queue), fn_(std::move(fn)) {}
  void run(uint64_t seq) override { fn_(seq, static_cast<QueuedWork&>(*this)); }

 private:
  Fn fn_;
};

}  // namespace tdist::pg
