// Peer: one rank's connections to one other rank in the TCP transport (gloo's "pair").
//
// A Peer owns `nsocks` sockets ("lanes", TDIST_SOCKET_NSOCKS_PERPEER) to its peer and
// both directions of traffic on them. Each message goes whole on one lane: the n-th
// message sent to the peer (counting all tags) goes on lane n % nsocks, so consecutive
// messages (e.g. the chunks of a pipelined collective, even with equal tags) travel in
// parallel on different sockets. The receiver knows the same rule, and matches headers
// strictly in send order: a lane whose next data header is not the next message in send
// order stops being read ("blocked") until the lanes before it have delivered their
// headers. Payloads then flow on all lanes at once. Matching against posted receives and
// the unexpected queue therefore sees messages exactly in send order, as with one socket,
// so comm.h's per-(peer, tag) FIFO holds with no per-tag state. Control frames (goodbye,
// abort notice) are handled on whichever lane they arrive, without taking a turn.
//  - sends: a FIFO of Ops per lane. post_send writes at once on the caller's thread when
//    nothing is queued on its lane (header and payload in one sendmsg) and queues only
//    what the kernel did not take; flush_locked() writes the rest (on EPOLLOUT in the I/O
//    thread, or in a waiter that drives the send, see wait_for).
//    A send completes when its last byte is in the kernel.
//  - receives: posted receives (FIFO per tag) and unexpected messages (arrived before
//    their receive; payload copied to the heap). read_lane_locked() reads into the lane's
//    64 KiB staging buffer, or, once a header has been matched to a posted receive,
//    straight into the user's buffer (readv: user buffer, then staging for what follows).
// A message whose length differs from its receive's fails only that receive with
// DesyncError; its payload is read and dropped, so the stream stays in step.
// Thread-safety: one mutex per direction (send_mu_, recv_mu_, each covering all lanes),
// never held together; any thread may call any method (a leaf mutex guards the epoll
// registration). A broken connection (any lane) is reported through `on_lost` (called with
// no lock held), whose owner then aborts the Comm and calls fail_all on every Peer.
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
#include <vector>

#include "net/fd.h"
#include "tdist/deadline.h"
#include "transport/tcp/request.h"

namespace tdist::transport::tcp {

class Peer {
 public:
  // Receives the full message ("rank R: connection to rank P (...) lost: ...").
  using LostHandler = std::function<void(const std::string& message)>;

  // epoll event data of lane `lane` of the peer of rank `rank`.
  static uint32_t token(int rank, size_t lane) {
    return static_cast<uint32_t>(rank) | static_cast<uint32_t>(lane << kLaneShift);
  }
  static constexpr int kLaneShift = 24;
  static constexpr size_t kMaxLanes = 8;

  // Takes the connected sockets (lane i = fds[i]); registers them with `epoll_fd` (event
  // data = token(rank, lane)).
  Peer(int self_rank, int rank, std::vector<net::Fd> fds, std::string address, int epoll_fd,
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
  void on_readable(size_t lane);
  void on_writable(size_t lane);
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
    bool complete = false;  // else it is lanes_[lane].incoming (incoming.got bytes arrived)
    size_t lane = 0;
  };
  // The message being read on a lane: header parsed, payload still arriving.
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
  struct Lane {
    net::Fd fd;
    // send side, guarded by send_mu_
    std::deque<std::shared_ptr<Op>> send_queue;
    // receive side, guarded by recv_mu_
    Incoming incoming;
    std::unique_ptr<uint8_t[]> staging;
    size_t staged_begin = 0;
    size_t staged_end = 0;
    uint64_t next_seq = 0;  // send-order number of the next data message on this lane
    bool blocked = false;   // a data header waits in staging for its turn
    bool goodbye = false;   // the peer said goodbye on this lane
    bool eof = false;       // read side done
    // guarded by interest_mu_
    bool want_in = true;
    bool want_out = false;
    bool registered = true;
  };

  // --- receive side (peer_recv.cc); all need recv_mu_ held. Return "" or why lost.
  // Reads lane `lane` (every lane when kAllLanes), then processes lanes whose turn came.
  static constexpr size_t kAllLanes = ~size_t{0};
  std::string read_locked(size_t lane = kAllLanes);
  std::string read_lane_locked(size_t lane);
  std::string unblock_locked();  // consumes the staged header of the lane whose turn it is
  std::string consume_staged_locked(size_t lane);
  std::string start_message_locked(size_t lane, uint64_t tag, uint64_t bytes);
  std::string finish_message_locked(size_t lane);
  std::exception_ptr desync(uint64_t tag, size_t expected, size_t actual) const;
  void stop_polling(size_t lane);  // removes the socket from epoll (its read side is finished)
  bool all_eof_locked() const;
  void refresh_want_in_locked();  // the I/O thread reads the unblocked lanes (no driver)

  // --- send side (peer.cc); need send_mu_ held.
  std::string flush_locked();
  std::string flush_lane_locked(size_t lane);
  bool sends_queued_locked() const;
  void refresh_want_out_locked();

  // --- the I/O thread's interest in the sockets (peer_wait.cc); any lock may be held.
  void set_want_in(size_t lane, bool want);
  void set_want_out(size_t lane, bool want);
  void update_interest_locked(size_t lane);  // needs interest_mu_

  // "rank R: connection to rank P (address) lost: <reason>".
  std::string lost(const std::string& reason) const;
  void report(const std::string& message);  // calls on_lost_ (no lock may be held)

  const int self_rank_;
  const int rank_;
  const std::string address_;
  const int epoll_fd_;
  LostHandler on_lost_;
  std::vector<Lane> lanes_;  // fixed size after construction
  const size_t nlanes_;
  std::atomic<bool> peer_gone_{false};  // the peer said goodbye (destroys its Comm)

  std::mutex send_mu_;
  uint64_t send_seq_ = 0;          // guarded by send_mu_: messages sent so far
  bool send_driver_ = false;       // guarded by send_mu_: a waiter writes
  std::exception_ptr send_error_;  // guarded by send_mu_

  std::mutex recv_mu_;
  std::deque<std::shared_ptr<Op>> posted_;  // guarded by recv_mu_
  std::list<Unexpected> unexpected_;        // guarded by recv_mu_
  uint64_t recv_seq_ = 0;                   // guarded by recv_mu_: data headers matched
  size_t goodbyes_ = 0;                     // guarded by recv_mu_: lanes that said goodbye
  bool recv_driver_ = false;                // guarded by recv_mu_: a waiter reads
  bool goodbye_ = false;                    // guarded by recv_mu_: goodbye on every lane
  std::exception_ptr recv_error_;           // guarded by recv_mu_

  // The epoll registrations (a leaf lock: taken under send_mu_ or recv_mu_).
  std::mutex interest_mu_;
};

}  // namespace tdist::transport::tcp
