// Peer: one rank's connection to one other rank in the TCP transport (gloo's "pair").
//
// A Peer owns its socket and both directions of traffic on it:
//  - sends: a FIFO of Ops. post_send writes at once on the caller's thread when nothing
//    is queued (header and payload in one sendmsg) and queues only what the kernel did
//    not take; flush_locked() writes the rest (on EPOLLOUT in the I/O thread, or in a
//    waiter that drives the send, see wait_for).
//    A send completes when its last byte is in the kernel.
//  - receives: posted receives (FIFO per tag) and unexpected messages (arrived before
//    their receive; payload copied to the heap). read_locked() reads into a 64 KiB staging
//    buffer, or, once a header has been matched to a posted receive, straight into the
//    user's buffer (readv: user buffer, then staging for what follows).
// A message whose length differs from its receive's fails only that receive with
// DesyncError; its payload is read and dropped, so the stream stays in step.
// Thread-safety: one mutex per direction (send_mu_, recv_mu_), never held together; any
// thread may call any method (a leaf mutex guards the epoll registration). A broken connection is
// reported through `on_lost` (called with no lock held), whose owner then aborts the Comm and calls
// fail_all on every Peer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "net/fd.h"
#include "tdist/deadline.h"
#include "transport/tcp/request.h"

namespace tdist::transport::tcp {

class Peer {
 public:
  // Receives the full message ("rank R: connection to rank P (...) lost: ...").
  using LostHandler = std::function<void(const std::string& message)>;

  // Takes the connected socket; registers it with `epoll_fd` (event data = peer rank).
  Peer(int self_rank, int rank, net::Fd fd, std::string address, int epoll_fd,
       size_t socket_buffer_bytes, LostHandler on_lost);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int self_rank() const { return self_rank_; }
  int rank() const { return rank_; }
  const std::string& address() const { return address_; }

  std::shared_ptr<Op> post_send(uint64_t tag, const void* data, size_t bytes);
  std::shared_ptr<Op> post_recv(uint64_t tag, void* data, size_t bytes);
  // Withdraws a pending op whose Request is being destroyed (see request.h).
  void cancel(Op& op);

  // Progress, from the I/O thread (blocking on the locks) or a waiter (try_lock only).
  // Both do nothing while a waiter drives that direction (see wait_for).
  void on_readable();
  void on_writable();
  // test(): makes progress towards `op` when its lock is free and nobody drives it.
  void try_progress(const Op& op);
  // Waits for `op` until `deadline` (false then). When nobody else drives the op's
  // direction, the caller drives it, and the other direction too when it is free (reads
  // while waiting for a send, flushes queued sends while waiting for a receive): the I/O
  // thread stops watching those directions and the caller blocks in poll() on the socket
  // and reads/writes itself, so a message wakes the waiting thread directly (no hand-off
  // through the I/O thread).
  bool wait_for(Op& op, Deadline deadline);

  // Fails every pending op and every later one with `error`. With `tell_peer`, sends the
  // peer an abort notice (best effort) and shuts the socket down so the peer notices.
  void fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason);
  // Clean close at destruction: tells the peer we are done and shuts down our sending
  // side. Best effort, bounded by a short deadline; never reports errors.
  void say_goodbye(Deadline deadline);

 private:
  static constexpr size_t kStagingBytes = 64 * 1024;
  // Bytes read per on_readable before returning to the loop (fairness with writes).
  static constexpr size_t kReadBudget = 4 * 1024 * 1024;

  struct Unexpected {
    uint64_t tag = 0;
    size_t bytes = 0;
    std::unique_ptr<uint8_t[]> data;
    bool complete = false;  // else it is incoming_ (incoming_.got bytes arrived)
  };
  // The message being read: header parsed, payload still arriving.
  struct Incoming {
    bool active = false;
    uint64_t tag = 0;
    size_t bytes = 0;
    size_t got = 0;
    uint8_t* dest = nullptr;  // null: the payload is dropped
    std::shared_ptr<Op> op;   // the matched receive, if any
    Unexpected* unexpected = nullptr;
    std::string control;  // payload of an abort notice
  };

  // --- receive side (peer_recv.cc); all need recv_mu_ held. Return "" or why lost.
  std::string read_locked();
  std::string consume_staged_locked();
  std::string start_message_locked(uint64_t tag, uint64_t bytes);
  std::string finish_message_locked();
  std::exception_ptr desync(uint64_t tag, size_t expected, size_t actual) const;
  void stop_polling();  // removes the socket from epoll (its read side is finished)

  // --- send side (peer.cc); need send_mu_ held.
  std::string flush_locked();

  // --- the I/O thread's interest in this socket (peer_wait.cc); any lock may be held.
  void set_want_in(bool want);
  void set_want_out(bool want);
  void update_interest_locked();  // needs interest_mu_

  // "rank R: connection to rank P (address) lost: <reason>".
  std::string lost(const std::string& reason) const;
  void report(const std::string& message);  // calls on_lost_ (no lock may be held)

  const int self_rank_;
  const int rank_;
  const std::string address_;
  net::Fd fd_;
  const int epoll_fd_;
  LostHandler on_lost_;
  std::atomic<bool> peer_gone_{false};  // the peer said goodbye (destroyed its Comm)

  std::mutex send_mu_;
  std::deque<std::shared_ptr<Op>> send_queue_;  // guarded by send_mu_
  bool send_driver_ = false;                    // guarded by send_mu_: a waiter writes
  std::exception_ptr send_error_;               // guarded by send_mu_

  std::mutex recv_mu_;
  std::deque<std::shared_ptr<Op>> posted_;  // guarded by recv_mu_
  std::list<Unexpected> unexpected_;        // guarded by recv_mu_
  Incoming incoming_;                       // guarded by recv_mu_
  std::unique_ptr<uint8_t[]> staging_;      // guarded by recv_mu_
  size_t staged_begin_ = 0;                 // guarded by recv_mu_
  size_t staged_end_ = 0;                   // guarded by recv_mu_
  bool recv_driver_ = false;                // guarded by recv_mu_: a waiter reads
  bool goodbye_ = false;                    // guarded by recv_mu_: peer closed cleanly
  bool eof_ = false;                        // guarded by recv_mu_: socket read side done
  std::exception_ptr recv_error_;           // guarded by recv_mu_

  // The epoll registration (a leaf lock: taken under send_mu_ or recv_mu_).
  std::mutex interest_mu_;
  bool want_in_ = true;     // guarded by interest_mu_
  bool want_out_ = false;   // guarded by interest_mu_
  bool registered_ = true;  // guarded by interest_mu_
};

}  // namespace tdist::transport::tcp
