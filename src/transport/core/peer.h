// Peer: one rank's link to one other rank in the core — the framed message streams over
// the peer's channels, send queues, receive matching and unexpected messages.
//
// A Peer has one or more channels to its peer ("lanes"; TCP can open several sockets per
// peer, TDIST_SOCKET_NSOCKS_PERPEER; other kinds have one). Each message goes whole on one
// lane: the n-th message sent to the peer (counting all tags) goes on lane n % lanes, so
// consecutive messages (e.g. the chunks of a pipelined collective) travel in parallel. The
// receiver knows the same rule and matches headers strictly in send order: a lane whose
// next header is not the next message in send order stops being read ("blocked") until
// the lanes before it delivered their headers. Matching against posted receives and the
// unexpected queue therefore sees messages exactly in send order, so comm.h's
// per-(peer, tag) FIFO holds with no per-tag state. Control frames (wire.h: goodbye, abort
// notice) are handled on whichever lane they arrive, without taking a turn.
//  - sends: a FIFO of Ops per lane. post_send writes at once on the caller's thread when
//    nothing is queued on its lane and queues only what the channel did not take;
//    progress() writes the rest. A send completes when its last byte is in the channel.
//    A short eager send (up to 4 KiB) that the channel takes whole there needs no Op at
//    all: post_send returns null for it.
//  - receives: posted receives (FIFO per tag) and unexpected messages (arrived before
//    their receive; payload copied to the heap). A point-to-point message may go to a
//    receive posted for any source instead, when that was posted first (any_source.h).
//    Matching is peer_match.cc. Each lane reads into a 64 KiB staging
//    buffer, or, once a header has been matched to a posted receive, straight into the
//    user's buffer (then staging for what follows). A channel with memory of its own
//    (shm: Channel::peek) hands a message whose receive is posted over whole: header
//    matched and payload copied to the user's buffer straight from the ring.
//  - rendezvous (wire.h): a send of at least its channel's rendezvous_bytes() goes as a
//    descriptor; it waits in rv_sends_ until the receiver copied it out (kRvDoneTag) or
//    asked for the payload (kRvReadyTag, then a kRvDataTag frame). An unexpected one costs
//    only its descriptor. The receive side queues its answers in replies_ and the frames
//    it gets in rv_events_; exchange_rendezvous() moves both to the send side, so the two
//    locks are still never held together.
// A message whose length or fingerprint (wire.h's check) differs from its receive's fails
// only that receive with DesyncError; its payload is read and dropped, so the stream stays
// in step. A checked message that arrives before its receive is judged at once and again
// when its collective begins here (collective_book.h): one of a finished collective, or of
// the running one with another fingerprint, is reported like a lost link, as a desync
// (kDesyncMark), since no receive will ever take it (ranks running different operations use
// different tags).
// Thread-safety: one mutex per direction (send_mu_, recv_mu_, each covering all lanes),
// never held together; any thread may call any method. Methods that discover a broken
// link return the full message ("rank R: connection to rank P (shm pid 12) lost: ...")
// through `lost`, with no lock held on return; the owner then aborts the Comm.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/thread_annotations.h"
#include "transport/core/any_source.h"
#include "transport/core/channel.h"
#include "transport/core/collective_book.h"
#include "transport/core/op.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {

// What one progress call did.
struct Progress {
  bool moved = false;  // bytes went through a channel
  int completed = 0;   // Ops completed
  Progress& operator+=(const Progress& o) {
    moved = moved || o.moved;
    completed += o.completed;
    return *this;
  }
};

// A lost message (or an abort reason) that begins with one of these bytes reports a desync,
// or a peer's timeout: the Engine fails the Comm with DesyncError (TimeoutError) instead of
// PeerError, and tells the peers so.
inline constexpr char kDesyncMark = '\x1d';
inline constexpr char kTimeoutMark = '\x1e';
inline bool is_marked(const std::string& text) {
  return !text.empty() && (text.front() == kDesyncMark || text.front() == kTimeoutMark);
}
// The error of a lost message: DesyncError or TimeoutError where it is marked so, else
// PeerError (peer_context.cc).
std::exception_ptr error_of_lost(const std::string& lost);

class Peer {
 public:
  static constexpr size_t kMaxLanes = 64;
  using Check = CollectiveBook::Check;

  // `book` and `any` (the Engine's) outlive the Peer.
  Peer(int self_rank, int rank, std::vector<std::unique_ptr<Channel>> lanes, CollectiveBooks& book,
       AnySourceQueue& any);
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int rank() const { return rank_; }
  const char* kind() const { return lanes_.front().channel->kind(); }
  bool carries_device() const { return lanes_.front().channel->device() != nullptr; }
  size_t lane_count() const { return lanes_.size(); }
  Channel& first_channel() { return *lanes_.front().channel; }  // its slots (Engine)
  bool connected() const { return lanes_.front().channel->connected(); }
  bool gone() const { return peer_gone_.load(std::memory_order_acquire); }

  // The first operation for this peer: lazy channels start connecting (Channel::activate).
  // post_send and post_recv call it; any-source receives call it for every peer.
  void activate() {
    if (activated_.load(std::memory_order_relaxed)) return;
    activated_.store(true, std::memory_order_relaxed);
    for (Lane& lane : lanes_) lane.channel->activate();
  }

  // Null: the send went out whole and is complete.
  // `check`: the fingerprint the message carries, or the one the receive expects.
  // `device`: the buffer is device memory (wire.h; only where carries_device()); a device
  // send throws what Channel::export_device throws, before anything is sent.
  std::shared_ptr<Op> post_send(uint64_t tag, const void* data, size_t bytes, Check check,
                                std::string* lost, bool device = false);
  // `progress` counts the any-source receives posted earlier that took this peer's
  // unexpected messages instead (other threads may wait for them).
  std::shared_ptr<Op> post_recv(uint64_t tag, void* data, size_t bytes, Check check,
                                std::string* lost, Progress* progress, bool device = false);
  // Any source (any_source.h): the arrival stamp of this peer's first unexpected message with
  // `tag` (AnySourceQueue::kNone: none), and handing that message to the earliest waiting
  // any-source receive for `tag` (false when either is missing by now).
  uint64_t first_arrival(uint64_t tag);
  bool give_unexpected(uint64_t tag, Progress* progress, std::string* lost);
  // The desync report (kDesyncMark) for a checked message from this peer that waits
  // unexpected although its collective is finished here, or whose fingerprint differs from
  // the running collective's (collective_book.h); "" if none.
  std::string find_desync();
  // Tells the peer that this rank's receive of collective message `tag` waits, under
  // fingerprint `check` (wire.h's kProbeTag); written by the next flush. Nothing once the
  // peer is gone or a send failed.
  void send_probe(uint64_t tag, Check check) TDIST_EXCLUDES(send_mu_);
  // Withdraws a pending Op whose Request is being destroyed (op.h). A device send cannot
  // outlive its buffer: its cancel returns the lost message that aborts the Comm.
  std::string cancel(Op& op);
  // Contexts (comm.h; peer_context.cc): fails every pending Op of `context` with `error`,
  // withdrawn as cancel() withdraws it (a host send still goes out whole, from a copy; a
  // device send completes as usual), and drops the context's unexpected messages (a
  // rendezvous answered, so that its send completes). With a `notice` (the reason, marked
  // as an abort notice is), queues it to the peer (wire.h's kContextAbortTag). The book has
  // the context closed already: its later messages are dropped as they arrive.
  Progress fail_context(uint32_t context, const std::exception_ptr& error,
                        const std::string* notice);
  // The contexts this peer told us it aborted since the last call, closed here by its notice
  // (not before): the Engine fails their other requests and tells their other ranks. Each
  // with the error they fail with ("rank 1: rank 0 (tcp ...) aborted the group: <reason>").
  struct ContextAbort {
    uint32_t context;
    std::exception_ptr error;
  };
  bool has_context_aborts() const {
    return context_aborts_pending_.load(std::memory_order_acquire);
  }
  std::vector<ContextAbort> take_context_aborts();
  // Sends queued, or bytes a channel took that still wait in it (Channel::holds_unsent).
  bool sends_queued() const {
    return queued_.load(std::memory_order_acquire) > 0 || held_.load(std::memory_order_acquire);
  }
  // Rendezvous sends waiting for the peer to take their payload.
  bool rendezvous_pending() const { return rv_pending_.load(std::memory_order_acquire) > 0; }

  // One bounded pass: writes queued sends, reads the lanes that have bytes.
  Progress progress(std::string* lost);

  // Polling: refreshes every lane (Channel::refresh) and tells, without taking a lock,
  // whether progress() may find something to do (sends queued, bytes to read, rendezvous
  // frames to pass on). Cheap enough to spin on.
  bool poll_hint() {
    bool hint = sends_queued() || rv_exchange_.load(std::memory_order_acquire);
    for (Lane& lane : lanes_) {
      lane.channel->refresh();
      hint = hint || lane.channel->readable();
    }
    return hint;
  }

  // Sleeping (channel.h): arms every lane and appends one pollfd per lane to `fds`; after
  // the caller's seq_cst fence, ready() tells whether work arrived meanwhile; after poll(),
  // wake_up() takes the pollfds appended here (same order) and disarms.
  void prepare_sleep(std::vector<pollfd>* fds);
  bool ready();
  void wake_up(const pollfd* fds);

  // Fails every pending and later Op with `error`. With `tell_peer`, writes the abort
  // notice (best effort, never blocks) and shuts the channels down so the peer notices.
  void fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason);
  // Clean close at destruction (sends already flushed): the goodbye frame on every lane,
  // then each channel's close. Best effort, bounded by `deadline`; never reports errors.
  void say_goodbye(Deadline deadline);

 private:
  static constexpr size_t kStagingBytes = 64 * 1024;
  // Bytes read per lane and pass (fairness between peers and with writes).
  static constexpr size_t kReadBudget = 4 * 1024 * 1024;

  struct Unexpected {
    uint64_t tag = 0;
    size_t bytes = 0;
    Check check;
    std::unique_ptr<uint8_t[]> data;  // null for a rendezvous
    bool complete = false;  // else it is lanes_[lane].incoming (incoming.got bytes arrived)
    size_t lane = 0;
    bool rendezvous = false;
    RvDescriptor rv;      // a rendezvous's, once complete
    bool asked = false;   // kRvReadyTag went for it: its payload is on the way
    bool device = false;  // a device rendezvous (wire.h); its descriptor once complete:
    std::unique_ptr<DeviceDescriptor> device_descriptor;
    // A device payload imported before its receive, in the channel's memory (freed with it).
    std::shared_ptr<void> device_data;
    uint64_t arrival = 0;  // a point-to-point message's AnySourceQueue::next_arrival()
  };
  // A rendezvous frame to send (replies_: kRvReadyTag/kRvDoneTag on `lane`) or received
  // (rv_events_).
  struct RvFrame {
    uint64_t tag = 0;
    uint64_t id = 0;
    size_t lane = 0;
  };
  // The message being read on a lane: header parsed, payload still arriving. Besides
  // data (and abort notices, into `control`), a rendezvous descriptor, the id that heads
  // a kRvDataTag frame, or a reply's id is read into `words`.
  enum class Reading : uint8_t { kData, kRvRequest, kRvDataId, kRvReply, kProbe };
  struct Incoming {
    bool active = false;
    Reading reading = Reading::kData;
    uint64_t tag = 0;
    size_t bytes = 0;  // on the wire
    size_t got = 0;
    uint8_t* dest = nullptr;  // null: the payload is dropped
    std::shared_ptr<Op> op;   // the matched receive, if any
    Unexpected* unexpected = nullptr;
    std::string control;  // payload of an abort notice (a context's too)
    bool device = false;  // a device rendezvous: its DeviceDescriptor follows in `words`
    uint64_t words[(sizeof(RvDescriptor) + sizeof(DeviceDescriptor)) / sizeof(uint64_t)] = {};
    size_t message_bytes = 0;  // a rendezvous's payload bytes
  };
  // Its fields are not TDIST_GUARDED_BY: a Lane cannot name its Peer's mutexes. The
  // functions that touch them require the lock of their side.
  struct Lane {
    std::unique_ptr<Channel> channel;
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
  };

  // --- matching (peer_match.cc); all need recv_mu_ held.
  // A new receive of this peer: an unexpected message, or posted_.
  void match_posted_locked(const std::shared_ptr<Op>& op, Progress* progress, std::string* lost)
      TDIST_REQUIRES(recv_mu_);
  // Gives unexpected message `it` to receive `op`, and forgets it.
  void deliver_locked(std::list<Unexpected>::iterator it, const std::shared_ptr<Op>& op,
                      Progress* progress, std::string* lost) TDIST_REQUIRES(recv_mu_);
  // The receive a new data message with `tag` goes to (removed from posted_ or claimed from
  // the any-source queue, whichever was posted first), or null.
  std::shared_ptr<Op> take_receive_locked(uint64_t tag) TDIST_REQUIRES(recv_mu_);

  // --- receive side (peer_recv.cc); all need recv_mu_ held. Return "" or the lost message.
  std::string read_lane_locked(size_t lane, Progress* progress) TDIST_REQUIRES(recv_mu_);
  // One message from the channel's own memory (Channel::peek) into its posted receive, when
  // it is a short data message next in send order, whole in view; false otherwise.
  bool read_direct_locked(Lane& lane, Progress* progress) TDIST_REQUIRES(recv_mu_);
  // The staged header whose turn came.
  std::string unblock_locked(Progress* progress) TDIST_REQUIRES(recv_mu_);
  std::string consume_staged_locked(size_t lane, Progress* progress) TDIST_REQUIRES(recv_mu_);
  std::string start_message_locked(size_t lane, const WireHeader& header, Progress* progress)
      TDIST_REQUIRES(recv_mu_);
  std::string finish_message_locked(size_t lane, Progress* progress) TDIST_REQUIRES(recv_mu_);
  // The text of the peer's abort notice: "rank 1: rank 0 (<channel>) aborted <what>:
  // <reason>", marked as `reason` is (a desync or a timeout over there).
  std::string aborted_text(size_t lane, const char* what, const std::string& reason) const;
  // A kContextAbortTag notice arrived whole (peer_context.cc): closes the context, fails
  // this peer's receives of it, and keeps it for the Engine.
  std::string context_aborted_locked(size_t lane, const std::string& payload, Progress* progress)
      TDIST_REQUIRES(recv_mu_);
  std::string end_of_stream_locked(size_t lane, const std::string& why) TDIST_REQUIRES(recv_mu_);
  // The peer said goodbye on `lane` (its frame, or a lazy channel's departed(), channel.h);
  // once on every lane it is gone.
  std::string goodbye_locked(size_t lane) TDIST_REQUIRES(recv_mu_);
  std::string finish_rendezvous_locked(size_t lane, Incoming& done, Progress* progress)
      TDIST_REQUIRES(recv_mu_);
  // Copies a rendezvous's payload out of the peer's memory to `dest` and queues the
  // answer: kRvDoneTag when that worked, else kRvReadyTag (the payload is then streamed).
  bool copy_out_locked(size_t lane, void* dest, size_t bytes, const RvDescriptor& rv)
      TDIST_REQUIRES(recv_mu_);
  // A matched rendezvous: copies it out of the peer's memory, or asks for the payload. A
  // device one (`device` not null) is copied by the channel; "" or the lost message.
  std::string fetch_locked(size_t lane, const std::shared_ptr<Op>& op, const RvDescriptor& rv,
                           const DeviceDescriptor* device, Progress* progress)
      TDIST_REQUIRES(recv_mu_);
  // Holds `op` in rv_recvs_ until the payload with sender's id `id` arrives; an id already
  // held is a protocol error (`op` fails; the lost message).
  std::string await_payload_locked(const std::shared_ptr<Op>& op, uint64_t id, Progress* progress)
      TDIST_REQUIRES(recv_mu_);
  // A single-copy message with no receive yet: copies it into a buffer of its own (then
  // it is an ordinary unexpected message), or asks for the payload.
  std::string pull_unexpected_locked(size_t lane, Unexpected& u) TDIST_REQUIRES(recv_mu_);
  // The same for a device message: imported into device memory of the channel's own.
  std::string pull_unexpected_device_locked(size_t lane, Unexpected& u) TDIST_REQUIRES(recv_mu_);
  // fail_context's receive side.
  void fail_context_receives_locked(uint32_t context, const std::exception_ptr& error,
                                    Progress* progress) TDIST_REQUIRES(recv_mu_);
  // cancel()'s two halves (the Op not done).
  std::string cancel_send_locked(Op& op) TDIST_REQUIRES(send_mu_);
  void cancel_recv_locked(Op& op) TDIST_REQUIRES(recv_mu_);
  // Moves replies_ and rv_events_ to the send side (takes recv_mu_, then send_mu_).
  Progress exchange_rendezvous(std::string* lost) TDIST_EXCLUDES(send_mu_, recv_mu_);
  std::exception_ptr desync(uint64_t tag, size_t expected, size_t actual) const;
  // The DesyncError of a receive whose memory kind (host, device) differs from its message's.
  std::exception_ptr kind_mismatch(uint64_t tag, bool receive_on_device) const;
  // The DesyncError of a receive whose fingerprint differs from its message's, and its text.
  std::exception_ptr mismatch(uint64_t tag, Check mine, Check theirs) const;
  std::string mismatch_text(uint64_t tag, Check mine, Check theirs) const;
  // The desync report of a message of a finished collective.
  std::string stale(uint64_t tag, Check theirs) const;
  // The desync report for a checked message without a receive: of a finished collective, or
  // of the running one with another fingerprint; "" when it may still be received.
  std::string judge(uint64_t tag, Check theirs) const;
  // The desync report for the peer's probe (wire.h): this rank runs collective `tag` under
  // another fingerprint than the peer's `theirs`; "" otherwise (behind, ahead, agreeing).
  std::string judge_probe(uint64_t tag, Check theirs) const;
  // Whether `lane` has bytes to write: queued sends, or bytes its channel holds
  // (Channel::holds_unsent). Requires send_mu_.
  static bool wants_write_locked(Lane& lane);
  // Updates held_ after a write: whether any lane's channel holds bytes it took.
  void note_held_locked() TDIST_REQUIRES(send_mu_);
  void forget_locked(const Unexpected& u) TDIST_REQUIRES(recv_mu_);  // it leaves unexpected_
  std::string out_of_memory(size_t bytes) const;  // the lost message for a failed buffer
  // lost(reason), with `op` (a receive held nowhere fail_all looks: taken from posted_ or
  // a lane's Incoming; may be null) failed first with PeerError of that text.
  std::string fail_op(const std::shared_ptr<Op>& op, const std::string& reason,
                      Progress* progress) const;

  // The streams' part of progress(): queued sends out, lanes read.
  Progress progress_streams(std::string* lost) TDIST_EXCLUDES(send_mu_, recv_mu_);

  // --- send side (peer_send.cc); need send_mu_ held.
  void make_rendezvous_locked(Op& op, uint64_t flags, const DeviceDescriptor* device = nullptr)
      TDIST_REQUIRES(send_mu_);
  Progress flush_locked(std::string* lost) TDIST_REQUIRES(send_mu_);
  Progress flush_lane_locked(size_t lane, std::string* lost) TDIST_REQUIRES(send_mu_);
  // The peer is gone: forgets the sends no one waits for any more (those of aborted
  // contexts, failed already) and the notices, which were best effort.
  void drop_settled_locked() TDIST_REQUIRES(send_mu_);
  // Writes a control frame whole (abort: best effort, goodbye: waits up to `deadline`).
  bool write_frame_locked(size_t lane, uint64_t tag, const std::string& payload, Deadline deadline)
      TDIST_REQUIRES(send_mu_);

  // "rank R: connection to rank P (<channel>) lost: <reason>".
  std::string lost(const std::string& reason) const;

  const int self_rank_;
  const int rank_;
  CollectiveBooks& book_;
  AnySourceQueue& any_;
  std::vector<Lane> lanes_;             // fixed size after construction
  std::atomic<bool> activated_{false};  // activate() ran (a hint: activating twice is harmless)
  const size_t nlanes_;
  std::atomic<bool> peer_gone_{false};  // the peer said goodbye (destroys its Comm)
  std::atomic<int> queued_{0};          // sends in the lanes' queues
  std::atomic<bool> held_{false};       // a lane's channel holds bytes (note_held_locked)
  std::atomic<int> rv_pending_{0};      // rendezvous sends waiting for the peer

  Mutex send_mu_;
  uint64_t send_seq_ TDIST_GUARDED_BY(send_mu_) = 0;  // messages sent so far
  std::exception_ptr send_error_ TDIST_GUARDED_BY(send_mu_);
  uint64_t next_rv_id_ TDIST_GUARDED_BY(send_mu_) = 0;
  const uint64_t token_salt_;  // mixed into rendezvous tokens
  std::unordered_map<uint64_t, std::shared_ptr<Op>> rv_sends_ TDIST_GUARDED_BY(send_mu_);

  Mutex recv_mu_;
  std::deque<std::shared_ptr<Op>> posted_ TDIST_GUARDED_BY(recv_mu_);
  std::list<Unexpected> unexpected_ TDIST_GUARDED_BY(recv_mu_);
  uint64_t recv_seq_ TDIST_GUARDED_BY(recv_mu_) = 0;  // data headers matched
  size_t goodbyes_ TDIST_GUARDED_BY(recv_mu_) = 0;    // lanes that said goodbye
  std::exception_ptr recv_error_ TDIST_GUARDED_BY(recv_mu_);
  // Receives whose payload was asked for (kRvReadyTag), by the sender's id.
  std::unordered_map<uint64_t, std::shared_ptr<Op>> rv_recvs_ TDIST_GUARDED_BY(recv_mu_);
  std::vector<RvFrame> replies_ TDIST_GUARDED_BY(recv_mu_);
  std::vector<RvFrame> rv_events_ TDIST_GUARDED_BY(recv_mu_);
  std::atomic<bool> rv_exchange_{false};  // replies_ or rv_events_ may hold something
  std::vector<ContextAbort> context_aborts_ TDIST_GUARDED_BY(recv_mu_);  // the peer's notices
  std::atomic<bool> context_aborts_pending_{false};
};

}  // namespace tdist::transport::core
