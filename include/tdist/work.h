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
// Thread-safe: any thread may wait on, poll or finish a Work.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "tdist/deadline.h"

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
  void wait();  // no deadline of its own: the operation's own timeout ends it
  void wait(Deadline deadline);

  bool is_completed() const;
  bool is_success() const;               // completed without error
  std::exception_ptr exception() const;  // the error, or null
  const std::string& op() const { return op_; }

  // For backends: marks the operation finished (with an error when `error` is not
  // null) and wakes the waiters. The first call wins; later calls are ignored.
  void finish(std::exception_ptr error = nullptr);

 protected:
  // Called by wait() and is_completed() before they look at the state: a chance for a
  // derived Work to check its transport and call finish(). `deadline` bounds blocking in
  // it (Deadline::at(now) = do not block). The default does nothing.
  virtual void poll(Deadline deadline);

 private:
  const std::string op_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;         // guarded by mu_
  std::exception_ptr error_;  // guarded by mu_
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that is already finished (e.g. an operation with nothing to do).
WorkPtr completed_work(std::string op, std::exception_ptr error = nullptr);

}  // namespace tdist
