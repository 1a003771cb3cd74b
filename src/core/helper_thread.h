// HelperThread: a second thread that an owner (a process group) lends to its operations, so
// that an operation that runs two phases at once (collectives/hierarchy.h's run_overlapped)
// runs one of them there instead of starting a thread of its own.
//
// The thread starts on the first start() and lives until the HelperThread is destroyed (the
// destructor waits for a task still running, then joins). One task at a time: start() hands
// it one, join() waits until it has returned; the next start() comes after that join().
// Thread-safety: start() and join() are called by one thread at a time (the owner's worker);
// the task runs on the helper thread. A task must not throw (it catches what it must report).
#pragma once

#include <functional>
#include <thread>

#include "tdist/thread_annotations.h"

namespace tdist::core {

class HelperThread {
 public:
  HelperThread() = default;
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;
  ~HelperThread();

  // Runs `task` on the helper thread (started now if it is not yet); returns at once.
  void start(std::function<void()> task) TDIST_EXCLUDES(mu_);
  // Waits until the task given by the last start() has returned.
  void join() TDIST_EXCLUDES(mu_);

 private:
  void loop() TDIST_EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::function<void()> task_ TDIST_GUARDED_BY(mu_);  // the task to run; empty once taken
  bool busy_ TDIST_GUARDED_BY(mu_) = false;           // a task was given and has not returned
  bool stop_ TDIST_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first start(), under mu_
};

}  // namespace tdist::core
