// ProgressThread: the one thread of a tdist backend (backend.h) that waits on the
// point-to-point Works nobody else waits on, so that the futures taken from them
// (TorchWork::getFuture) complete: some transports move point-to-point messages only while
// somebody waits (transport/core/engine.h). Internal to the Python extension.
//
// Started by the first add(), so a group that takes no such future has no thread. It waits
// on the Works in the order given; a wait drives every message of the group, so later ones
// complete meanwhile. stop() (the backend's destructor) ends it within kStopPoll and leaves
// the Works not yet complete as they are: their group is going away. It waits as a
// background thread (core/polling.h): it never polls.
// Thread-safety: add() and stop() from any thread; stop() from the thread itself (a future's
// callback that drops the last reference to the backend) lets it end on its own.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "tdist/work.h"

namespace tdist::python {

class ProgressThread {
 public:
  // How long a wait lasts before the thread looks whether it should stop.
  static constexpr std::chrono::milliseconds kStopPoll{50};

  ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;
  ~ProgressThread();  // stop()

  // Has the thread wait on `works` (after those given earlier). Ignored once stopped.
  void add(std::vector<WorkPtr> works);
  void stop();

 private:
  struct State;
  static void run(const std::shared_ptr<State>& state);

  const std::shared_ptr<State> state_;  // shared with the thread, which may outlive this
};

}  // namespace tdist::python
