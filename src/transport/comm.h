// Comm: the transport-neutral view of a group of ranks that collective algorithms use.
//
// An algorithm sees only rank(), size(), topology() and tagged, non-blocking
// point-to-point messages; it never sees a socket or a shared-memory segment. One
// implementation serves every transport (core/engine.h): each peer is reached by a channel
// of some kind (tcp, shm; connect.h), and one progress engine drives them all.
//
// Matching: a message sent with isend(peer=P, tag=T) on rank R is delivered to the
// irecv(peer=R, tag=T) that rank P posts, in posting order among equal (peer, tag).
// Messages between one pair of ranks with different tags may be matched out of order
// (a message that arrives before its receive is posted is buffered by the transport). A
// receive must name the exact byte count: a message of another length is a DesyncError
// naming both lengths. Zero-byte messages are allowed.
// Completion of sends: a send may complete before its receive is posted (buffered
// eagerly over there, or copied out of this process by the receiver: core/wire.h), except
// a point-to-point send (p2p_tag) of 1 MiB or more, which completes only once its receive
// is posted (MPI's and gloo's rule), so that nothing that large is buffered. Code that
// waits on such a send before posting the receive it depends on deadlocks.
//
// Tags: collectives use collective_tag(seq, step) (the group's operation sequence number
// and a step within the operation); user point-to-point tags are p2p_tag(tag). The two
// ranges never overlap.
// Contexts: a tag's bits 55..62 name its context, 0 for a Comm used as it is. Groups split
// from one group share its Comm, each through a ContextComm (context_comm.h) that sets its
// own context in every tag, so their messages never meet; each context checks its own
// collectives (below). Layout: bit 63 point-to-point; bits 55..62 the context; then a
// collective's low 31 bits of `seq` (bits 24..54) and its step (bits 0..23), or a
// point-to-point message's user tag (bits 0..31).
//
// Fingerprints: a group calls begin_collective(seq, fp) before it runs collective `seq`.
// From then on every message with that sequence number carries the fingerprint (the
// operation, dtype, count, root, reduce op; core/op_fingerprint.h), and a receive matched
// to a message whose fingerprint differs fails with DesyncError naming both ranks and both
// operations ("rank 0 called all_reduce #41 f32 x1024 sum; rank 1 called broadcast #41 f32
// x1024 root 0"); so does a message of a collective this rank has already finished, since
// no receive will ever take it. The peers learn the reason with the abort (DesyncError
// there too), in each context separately. Sequence numbers are compared as the 31 bits a
// tag holds, modulo 2^31 (collectives run in order; none is 2^30 behind another).
//
// Any source (MPI_ANY_SOURCE): irecv_any(tag) receives the next message with `tag` (a
// p2p_tag) from whichever rank sends one; Request::source() then names that rank. The rule is
// MPI's: a message goes to the earliest posted receive that can take it, whether it names the
// message's source or any; a new receive takes the earliest arrived message it can (for
// irecv_any: of whichever rank, in arrival order across ranks; a rank's own messages stay in
// send order). Nothing else changes: the byte count must match (else DesyncError), large
// sends wait for their receive as above, and a pending any-source receive fails with the
// Comm's abort. Only point-to-point tags: collectives always know their peers.
//
// Ownership and lifetime: buffers passed to isend/irecv must stay valid and untouched
// until the Request completes (wait returned or test() returned true), or until the
// Request is destroyed. Destroying a pending Request cancels it: a receive is withdrawn
// (a later message with its tag goes to a later receive); a send is still delivered in
// full (the transport copies what it still needs from the buffer first).
//
// Memory kinds (tdist/device.h): isend/irecv take host memory. isend_device/irecv_device
// take CUDA device memory of the Comm's device, where carries_device(peer) (a cuda_ipc
// channel); their payload goes by descriptor, never through host memory (core/wire.h). A
// device send matches only a device receive (else DesyncError). Device sends complete once
// the receiver copied the payload (the rendezvous rule for every size), ordered after the
// device work the channel was told about (cuda_ipc: the group's stream). isend_on/irecv_on
// pick one by kind. Comms without device channels refuse device memory (InvalidArgument).
// Progress: bytes move while some thread waits on (or tests) a Request of the Comm; a
// thread waiting on any request also moves every other pending request of the Comm.
//
// Failure: when a peer dies, a connection breaks or abort() is called, the Comm is
// aborted: every pending and later request fails with PeerError (or the exception given
// to abort), on every rank within seconds (on ranks that wait on the Comm). wait() throws
// TimeoutError at its deadline without aborting. Thread-safety: isend/irecv/wait/test/
// abort may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>
#include <utility>

#include "core/op_fingerprint.h"
#include "tdist/deadline.h"
#include "tdist/device.h"
#include "transport/topology.h"

namespace tdist::transport {

// The words of a PeerError for a peer whose connection reached its end with neither a
// notice nor a goodbye: its process died. A peer that aborts sends its notice first and the
// stream keeps order, so such an end never hides a reason the peer gave (a failed write
// may: the notice can still be unread). Nested in what the other ranks then report.
inline constexpr std::string_view kPeerVanished =
    "the peer closed the connection without a goodbye";
inline bool reports_vanished_peer(std::string_view what) {
  return what.find(kPeerVanished) != std::string_view::npos;
}

inline constexpr uint64_t kP2PTagBit = uint64_t{1} << 63;
inline constexpr int kContextShift = 55;
// The highest context a tag may name (255 stays free).
inline constexpr uint32_t kMaxContext = 254;
inline constexpr int kTagSeqBits = 31;
// The peer of a receive posted for any source (irecv_any), where a rank is expected.
inline constexpr int kAnySource = -1;

// Tag of step `step` (< 2^24) of collective number `seq` on a group.
constexpr uint64_t collective_tag(uint64_t seq, uint32_t step) {
  return ((seq & ((uint64_t{1} << kTagSeqBits) - 1)) << 24) | (step & 0xFFFFFFu);
}

// Tag of a user's point-to-point message.
constexpr uint64_t p2p_tag(uint32_t user_tag) { return kP2PTagBit | user_tag; }
// Whether a message's tag is a point-to-point one (the transport's own tags aside).
constexpr bool is_p2p_tag(uint64_t tag) { return (tag & kP2PTagBit) != 0; }
// `tag` (of context 0) in context `context` (<= kMaxContext), and a tag's context.
constexpr uint64_t in_context(uint64_t tag, uint32_t context) {
  return tag | (uint64_t{context} << kContextShift);
}
constexpr uint32_t tag_context(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kContextShift) & 0xFF);
}

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until complete. Throws PeerError/DesyncError when the request failed (the
  // Comm's abort reason), TimeoutError at the deadline (the request stays pending).
  virtual void wait(Deadline deadline) = 0;
  // True once complete; rethrows the failure like wait().
  virtual bool test() = 0;
  // The rank whose message a completed receive holds: its peer, or for irecv_any the rank
  // that sent it. -1 for a send, and for a receive that is pending or failed.
  virtual int source() const { return -1; }
};

using RequestPtr = std::unique_ptr<Request>;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Device memory (see above). The defaults: no peer is reached by a device channel.
  virtual bool carries_device(int /*peer*/) const { return false; }
  virtual RequestPtr isend_device(int peer, uint64_t tag, const void* data, size_t bytes);
  virtual RequestPtr irecv_device(int peer, uint64_t tag, void* data, size_t bytes);
  RequestPtr isend_on(MemoryKind kind, int peer, uint64_t tag, const void* data, size_t bytes) {
    return kind == MemoryKind::kHost ? isend(peer, tag, data, bytes)
                                     : isend_device(peer, tag, data, bytes);
  }
  RequestPtr irecv_on(MemoryKind kind, int peer, uint64_t tag, void* data, size_t bytes) {
    return kind == MemoryKind::kHost ? irecv(peer, tag, data, bytes)
                                     : irecv_device(peer, tag, data, bytes);
  }

  // Any source (see above): host memory, or device memory where every peer carries_device().
  // The defaults refuse (InvalidArgument): a Comm that matches by source only.
  virtual RequestPtr irecv_any(uint64_t tag, void* data, size_t bytes);
  virtual RequestPtr irecv_any_device(uint64_t tag, void* data, size_t bytes);
  RequestPtr irecv_any_on(MemoryKind kind, uint64_t tag, void* data, size_t bytes) {
    return kind == MemoryKind::kHost ? irecv_any(tag, data, bytes)
                                     : irecv_any_device(tag, data, bytes);
  }

  // Checks (comm.h's "Fingerprints"): collective `seq`, described by `fp`, runs from now
  // until the next call. Throws DesyncError when a peer already sent this rank a message of
  // an earlier collective that it finished without receiving it. Comms that do not check
  // ignore it.
  virtual void begin_collective(uint64_t /*seq*/, const tdist::core::OpFingerprint& /*fp*/) {}
  // For the end of a collective in which this rank only sent (a broadcast's or a scatter's
  // root): reads what has arrived already, without waiting, so that a peer's message of the
  // same collective whose fingerprint differs (it named another root) is a DesyncError now,
  // not at the next collective. Throws the Comm's abort reason. Comms that do not check
  // ignore it.
  virtual void check_arrivals() {}

  // Slots: a small all-gather among all ranks through memory they map (an Engine whose
  // every peer is reached by shared memory: core/channel.h's slots), without messages, for
  // the latency-bound collectives of every rank. slot_bytes(): the largest block, 0 when
  // the Comm has none (the default; a ContextComm's), the same on every rank of a group.
  // slot_gather: every rank calls it in the same order, within the running collective
  // (begin_collective), with the same tag and bytes (<= slot_bytes()); blocks[r] then
  // points at rank r's `bytes` (this rank's own copy of `mine` at blocks[rank()]), valid
  // until this rank's next slot_gather. One call at a time per Comm. A rank whose tag,
  // fingerprint or size differs is a DesyncError naming both; a peer that left, PeerError;
  // the deadline, TimeoutError (the exchange cannot be resumed: the caller aborts); the
  // Comm's abort reason as wait()'s.
  virtual size_t slot_bytes() const { return 0; }
  virtual void slot_gather(uint64_t tag, const void* mine, size_t bytes, const void** blocks,
                           Deadline deadline);

  // Fails every pending and later request with `reason` (PeerError when null) and tells
  // the peers, so that they abort too. Idempotent; the first reason wins.
  virtual void abort(std::exception_ptr reason) = 0;
  // The abort reason, or null while the Comm is healthy.
  virtual std::exception_ptr error() const = 0;

  // Which ranks share a host (topology.h); set once by whoever builds the Comm, before
  // it is used. Unknown (empty) means one host.
  const Topology& topology() const { return topology_; }
  void set_topology(Topology topology) { topology_ = std::move(topology); }

 private:
  Topology topology_;
};

}  // namespace tdist::transport
