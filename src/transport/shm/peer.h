// Peer: one rank's link to one other rank in the shared-memory transport (gloo's "pair").
//
// A Peer owns the pair's unix socket and both rings (setup.h): it writes messages to the
// send ring and reads the receive ring (ring.h has the framing and the sleep protocol).
//  - sends: a FIFO of Ops. post_send writes at once, on the caller's thread, as much as
//    fits when nothing is queued (a small message completes inside post_send); flush()
//    writes the rest as the receiver frees space. A send completes when its last byte is
//    in the ring.
//  - receives: posted receives (FIFO per tag) and unexpected messages (arrived before
//    their receive; payload copied to the heap), matched strictly in ring order, so
//    comm.h's per-(peer, tag) FIFO holds. drain() copies payloads straight from the ring
//    into the posted buffer. A message whose length differs from its receive fails only
//    that receive with DesyncError; its payload is skipped, so the ring stays in step.
//  - the socket carries only control bytes: 'w' (wake up, see ring.h), 'g' (goodbye: the
//    peer is destroying its Comm; EOF follows and is not an error), 'a' + reason text
//    (the peer aborted; EOF follows). EOF without either means the peer died.
// Work per call is bounded (one ring's worth), so one busy peer cannot starve the others.
// Thread-safety: one mutex per direction (send_mu_, recv_mu_) and a leaf mutex for writes
// to the socket; any thread may call any method. Methods that can discover a broken link
// return the message ("rank R: shared-memory peer rank P (pid N) lost: ...") through
// `lost`, with no lock held on return; the owner then aborts the Comm (fail_all).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "transport/shm/request.h"
#include "transport/shm/ring.h"
#include "transport/shm/setup.h"

namespace tdist::transport::shm {

// What one progress call did.
struct Progress {
  bool moved = false;  // bytes went through a ring (or control bytes were read)
  int completed = 0;   // Ops completed
  Progress& operator+=(const Progress& o) {
    moved = moved || o.moved;
    completed += o.completed;
    return *this;
  }
};

class Peer {
 public:
  Peer(int self_rank, int rank, PeerLink link);
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int rank() const { return rank_; }
  int socket() const { return link_.socket.get(); }
  // False once the socket reached EOF or was shut down (no longer worth polling).
  bool pollable() const { return !closed_.load(std::memory_order_acquire); }

  // --- sends (peer_send.cc)
  std::shared_ptr<Op> post_send(uint64_t tag, const void* data, size_t bytes, std::string* lost);
  Progress flush(std::string* lost);
  bool sends_queued() const { return queued_.load(std::memory_order_acquire) > 0; }

  // --- receives (peer_recv.cc)
  std::shared_ptr<Op> post_recv(uint64_t tag, void* data, size_t bytes);
  Progress drain(std::string* lost);
  // Reads the control bytes waiting on the socket (never blocks).
  Progress read_control(std::string* lost);

  // Withdraws a pending Op whose Request is being destroyed (see request.h).
  void cancel(Op& op);

  // Sleep protocol (ring.h): sets the flags of the rings this rank waits on; then, after
  // the caller's seq_cst fence, ready() tells whether work arrived meanwhile.
  void arm_sleep();
  bool ready();
  void disarm_sleep();

  // Fails every pending and later Op with `error`. With `tell_peer`, sends the abort
  // notice (best effort, never blocks) and shuts the socket down so the peer notices.
  void fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason);
  // Clean close at destruction: 'g', shut down our side, drop what the peer sent.
  void say_goodbye();

 private:
  // Longest abort reason sent to a peer or kept from one.
  static constexpr size_t kMaxAbortReasonBytes = size_t{64} * 1024;

  struct Unexpected {
    uint64_t tag = 0;
    size_t bytes = 0;
    std::unique_ptr<uint8_t[]> data;
    bool complete = false;  // else it is incoming_'s message, still arriving
  };
  // The message being read from the ring: header consumed, payload still arriving.
  struct Incoming {
    bool active = false;
    uint64_t tag = 0;
    uint64_t bytes = 0;
    uint64_t got = 0;
    uint8_t* dest = nullptr;  // null: the payload is skipped
    std::shared_ptr<Op> op;   // the matched receive, if any
    Unexpected* unexpected = nullptr;
  };

  // Sends (need send_mu_).
  Progress write_locked();
  // Writes what fits of `op`, at most *budget bytes (decremented); true when the whole
  // message is in the ring.
  bool write_op_locked(Op& op, uint64_t* budget);
  void publish_head_locked();
  // Receives (need recv_mu_).
  Progress start_message_locked(uint64_t tag, uint64_t bytes, std::string* lost);
  Progress finish_message_locked();
  void publish_tail_locked();
  std::exception_ptr desync(uint64_t tag, size_t expected, size_t actual) const;

  void wake_peer();  // one 'w' byte (takes sock_mu_)
  std::string lost_message(const std::string& reason) const;

  const int self_rank_;
  const int rank_;
  PeerLink link_;
  const RingView out_;        // link_.send
  const RingView in_;         // link_.recv
  const uint64_t out_chunk_;  // bytes copied between publications of head
  const uint64_t in_chunk_;   // bytes copied between publications of tail
  std::atomic<bool> closed_{false};
  std::atomic<int> queued_{0};  // sends in send_queue_ (read without the lock when sleeping)

  std::mutex send_mu_;
  std::deque<std::shared_ptr<Op>> send_queue_;  // guarded by send_mu_
  uint64_t head_ = 0;                           // guarded by send_mu_: bytes written
  uint64_t published_head_ = 0;                 // guarded by send_mu_
  std::exception_ptr send_error_;               // guarded by send_mu_

  std::mutex recv_mu_;
  std::deque<std::shared_ptr<Op>> posted_;  // guarded by recv_mu_
  std::list<Unexpected> unexpected_;        // guarded by recv_mu_
  Incoming incoming_;                       // guarded by recv_mu_
  uint64_t tail_ = 0;                       // guarded by recv_mu_: bytes consumed
  uint64_t published_tail_ = 0;             // guarded by recv_mu_
  bool goodbye_ = false;                    // guarded by recv_mu_: 'g' received
  bool aborting_ = false;                   // guarded by recv_mu_: 'a' received
  std::string abort_text_;                  // guarded by recv_mu_
  std::exception_ptr recv_error_;           // guarded by recv_mu_
  std::atomic<bool> peer_gone_{false};      // 'g' received (read by post_send)

  std::mutex sock_mu_;  // leaf: serialises writes to the socket
  bool shut_ = false;   // guarded by sock_mu_
};

}  // namespace tdist::transport::shm
