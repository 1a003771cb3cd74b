// EpollLoop: a level-triggered epoll event loop that runs on one thread.
//
// Handlers are registered per descriptor and called on the thread inside run() with
// the ready events (EPOLLIN, EPOLLOUT, EPOLLHUP, ...). After each batch of events the
// optional after-batch hook runs (e.g. to flush output queued by the handlers).
// Ownership: the loop owns its epoll and eventfd descriptors, not the registered ones;
// remove() a descriptor before closing it. A handler may add, modify or remove any
// registration, its own included; a removed handler is never called again, even for an
// event already fetched in the same batch.
// Thread-safety: add/modify/remove/set_after_batch only on the loop thread (or before
// run() starts); wake() and stop() from any thread. Failures: Error when an epoll call
// fails; an exception thrown by a handler propagates out of run().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "net/fd.h"

namespace tdist::net {

class EpollLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;

  EpollLoop();
  ~EpollLoop();
  EpollLoop(const EpollLoop&) = delete;
  EpollLoop& operator=(const EpollLoop&) = delete;

  void add(int fd, uint32_t events, Handler handler);
  void modify(int fd, uint32_t events);
  void remove(int fd);
  void set_after_batch(std::function<void()> hook) { after_batch_ = std::move(hook); }

  // Dispatches events until stop() is called.
  void run();
  // Makes run() return after the current batch. Thread-safe.
  void stop();
  // Interrupts epoll_wait so the after-batch hook runs. Thread-safe.
  void wake();

 private:
  // Each registration gets a fresh token (kept in epoll_event.data), so an event fetched
  // for a descriptor that was removed, closed and reused in the same batch is dropped.
  std::unordered_map<uint64_t, std::shared_ptr<Handler>> handlers_;  // by token
  std::unordered_map<int, uint64_t> token_of_fd_;
  uint64_t next_token_ = 1;  // token 0 marks the eventfd
  Fd epoll_;
  Fd event_;
  std::function<void()> after_batch_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace tdist::net
