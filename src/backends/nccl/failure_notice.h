// FailureNotice: how the ranks of one nccl group tell each other that the group failed, so
// that one rank's NCCL error, timeout or abort() fails the others too (NCCL itself reports
// a peer's abort only on some transports). Through the group's store: the first rank that
// fails writes its error under the key `nccl/failed` of the group's namespace; every rank
// with operations pending checks for that key every `poll` and, when it is there, calls
// `on_peer_failure` with its text.
//
// Every store call happens on the notice's own thread, so none can block a group's
// watchdog or a caller (a store client serialises calls on one connection, and another
// thread's long wait would hold it). Destruction does not wait for a store call in flight:
// the thread, which owns its state, finishes it and ends; on_peer_failure is never called
// after the destructor returned. announce() is published even when the notice is destroyed
// right after it. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tdist/store.h"

namespace tdist::backends::nccl {

class FailureNotice {
 public:
  static constexpr const char* kKey = "nccl/failed";

  FailureNotice(std::shared_ptr<Store> store,
                std::function<void(const std::string&)> on_peer_failure,
                std::chrono::milliseconds poll = std::chrono::milliseconds(1000));
  ~FailureNotice();
  FailureNotice(const FailureNotice&) = delete;
  FailureNotice& operator=(const FailureNotice&) = delete;

  // This rank's group failed: publish `text` (once; later calls are ignored) and stop
  // watching for the peers'.
  void announce(std::string text);
  // Whether to look for a peer's notice (while the group has operations pending).
  void watch(bool active);

 private:
  struct State;
  static void run(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tdist::backends::nccl
