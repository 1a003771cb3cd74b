// Requests of the TCP transport: the completion flag a waiter sleeps on, the state of one
// send or receive (Op), and the Request handed to the caller.
//
// Ownership: an Op is shared (shared_ptr) by the caller's TcpRequest and, while pending,
// by its Peer's queues; the caller's buffer is only borrowed. Completion happens exactly
// once, under the owning Peer's lock for that direction, and is published with release
// order, so a waiter that sees it done also sees the bytes and the error.
// Waiting: the waiter drives its own I/O when it can (Peer::wait_for: blocks in poll()
// on the socket and reads or writes itself), else sleeps on a futex until another thread
// completes the op or the deadline passes. There is no spinning: measured on 2 cores
// with 2 ranks, a 10-50 us spin before blocking made the 8-byte round trip slower
// (56-120 us against 45-57 us without), as the spinner takes the core the peer needs.
// Thread-safety: complete/done/wait may race freely; one TcpRequest is used by one thread
// at a time (like any object). Destroying a pending TcpRequest cancels it (a receive is
// withdrawn, a partly written send keeps its remaining bytes in a private copy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>

#include "transport/comm.h"

namespace tdist::transport::tcp {

class Peer;

// A one-shot completion flag with an optional error.
class Completion {
 public:
  bool done() const { return (word_.load(std::memory_order_acquire) & kDone) != 0; }
  // Marks done with `error` (null = success) and wakes a sleeping waiter. Call once.
  void complete(std::exception_ptr error);
  // Sleeps until done or `deadline`; true when done.
  bool sleep_until_done(Deadline deadline);
  // The error, valid once done().
  const std::exception_ptr& error() const { return error_; }

 private:
  static constexpr uint32_t kDone = 1;
  static constexpr uint32_t kSleeping = 2;
  std::atomic<uint32_t> word_{0};
  std::exception_ptr error_;
};

struct Op {
  Op(Peer* owner, bool send, uint64_t op_tag, void* buffer, size_t size)
      : peer(owner), is_send(send), tag(op_tag), data(static_cast<uint8_t*>(buffer)), bytes(size) {}

  Completion completion;
  Peer* peer;  // null for a request that failed before it reached a peer
  bool is_send;
  uint64_t tag;
  uint8_t* data;
  size_t bytes;
  // Send only: header (tag, bytes) and the bytes of header + payload written so far;
  // `owned` holds the unsent remainder when the request was cancelled mid-message.
  uint64_t header[2] = {0, 0};
  size_t sent = 0;
  size_t lane = 0;  // send only: the socket of the peer it goes on
  std::unique_ptr<uint8_t[]> owned;
};

class TcpRequest final : public Request {
 public:
  explicit TcpRequest(std::shared_ptr<Op> op) : op_(std::move(op)) {}
  ~TcpRequest() override;
  void wait(Deadline deadline) override;
  bool test() override;

 private:
  std::shared_ptr<Op> op_;
};

// A request that already failed with `error`.
RequestPtr failed_request(bool send, uint64_t tag, size_t bytes, std::exception_ptr error);

}  // namespace tdist::transport::tcp
