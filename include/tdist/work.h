// Work: the handle of one asynchronous operation (a collective or a point-to-point op).
//
// Every ProcessGroup call returns a Work at once; the operation proceeds in the
// background. wait() blocks until it finished and rethrows its error (PeerError,
// TimeoutError, DesyncError, InvalidArgument); the blocking form of any call is
// `pg.all_reduce(...)->wait()`. The buffers given to the call must stay valid and
// untouched until the Work completed.
//
// Completion happens in exactly one place, finish(), which a backend calls once. A
// backend whose operations complete inside a transport (point-to-point) may derive and
// override poll() to drive completion from wait() and is_completed().
// Callbacks (add_callback) run once the Work finished, on the thread that finished it, or
// at once on the caller's thread when it already has: futures and wrappers build on them.
// Thread-safe: any thread may wait on, poll or finish a Work.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/thread_annotations.h"

namespace tdist {

class Work {
 public:
  // `op` names the operation in error messages (e.g. "all_reduce").
  explicit Work(std::string op = "op");
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  virtual ~Work();

  // Blocks until the operation finished, then rethrows its error if it failed. The
  // deadline only bounds this wait: TimeoutError leaves the operation running.
  void synchronize();  // no deadline of its own: the operation's own timeout ends it
  void synchronize(Deadline deadline);

  // The caller's wait: synchronize() here. A Work on CUDA tensors of the LibTorch layer
  // (tdist/torch/collectives.h) overrides it with torch's semantics: the caller's current
  // CUDA stream waits for the operation, the host does not.
  void wait() { wait(Deadline::never()); }
  virtual void wait(Deadline deadline);

  bool is_completed() const;
  bool is_success() const;               // completed without error
  std::exception_ptr exception() const;  // the error, or null
  const std::string& op() const { return op_; }
  // The group rank whose message a receive got, once it completed successfully: irecv's
  // src, or the rank that sent irecv_any's message (torch's Work.source_rank()). -1 while
  // the operation is pending (it does not wait), when it failed, and for every other
  // operation (sends, batch_isend_irecv, collectives).
  int source_rank() const;

  // Runs `fn` once the operation finished (either way): inside finish(), after the
  // waiters were woken and outside any lock of this Work, or now when it already has.
  // A Work that completes only when polled (point-to-point on some transports) runs its
  // callbacks when somebody waits on it. `fn` must not throw; it may use this Work.
  void add_callback(std::function<void()> fn);

  // For backends: marks the operation finished (with an error when `error` is not
  // null), wakes the waiters, then runs the callbacks. The first call wins; later calls
  // are ignored.
  void finish(std::exception_ptr error = nullptr);

 protected:
  // For backends: the source_rank() of a receive, set before its finish().
  void set_source_rank(int rank) { source_rank_.store(rank, std::memory_order_relaxed); }

  // Called by wait() and is_completed() before they look at the state: a chance for a
  // derived Work to check its transport and call finish(). `deadline` bounds blocking in
  // it (Deadline::at(now) = do not block). The default does nothing.
  virtual void poll(Deadline deadline);

 private:
  const std::string op_;
  // finish() claims the Work (the first call wins), writes error_, then sets finished_.
  // It takes mu_ only when watchers_ says that a thread waits in wait() or a callback is
  // registered: finishing an operation nobody blocks on takes no lock.
  std::atomic<bool> claimed_{false};
  std::exception_ptr error_;  // written once, before finished_; read only after it is seen
  std::atomic<bool> finished_{false};
  std::atomic<int> watchers_{0};      // blocked waiters plus registered callbacks
  std::atomic<int> source_rank_{-1};  // set before finish(); read once finished_ is seen
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::function<void()>> callbacks_ TDIST_GUARDED_BY(mu_);  // run once by finish()
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that is already finished (e.g. an operation with nothing to do).
WorkPtr completed_work(std::string op, std::exception_ptr error = nullptr);

}  // namespace tdist
