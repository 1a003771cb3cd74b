// The core's wire format on every channel (channel.h).
//
// Every message is a 32-byte header {u64 tag, u64 bytes, u64 check[2]} in host byte order
// (ranks of one group share an architecture), followed by `bytes` of payload ("eager").
// `check` is the sender's fingerprint of the collective the message belongs to
// (core/op_fingerprint.h; zero outside a checked collective and in control frames): the
// receiver compares it with its own for the matching receive (Comm::begin_collective). Tags from
// kFirstControlTag up, outside both tag ranges of comm.h, are control frames, handled on
// whichever lane they arrive without taking a turn in the send order:
//   kGoodbyeTag (0 bytes)  the sender is destroying its Comm cleanly; the end of the stream
//                          may follow and is not an error
//   kAbortTag (n bytes)    the sender aborted its Comm; the payload is the reason (text)
//   kRvReadyTag (8 bytes)  rendezvous: {id}: send me the payload of your message `id`
//   kRvDoneTag (8 bytes)   rendezvous: {id}: I copied message `id` out of your memory
//   kRvDataTag (8+n bytes) rendezvous: {id} then the n bytes of message `id`
//   kContextAbortTag (8+n) {context} then the reason (text, as kAbortTag's): the sender
//                          aborted that context of its Comm (comm.h's contexts; a split
//                          group's abort); the receiver aborts it too
//   kProbeTag (24 bytes)   {tag, check[2]}: the sender's receive of collective message `tag`
//                          from the receiver has waited a while (Engine::wait_for), under
//                          fingerprint `check`; a receiver running that collective under
//                          another fingerprint (another root: both wait to receive) aborts
//                          with a DesyncError; otherwise the probe is dropped
//
// Rendezvous: the sender writes the header with kRendezvousBit set in `bytes` and, instead
// of the payload, a descriptor (RvDescriptor: an id, the payload's address, the address
// and value of a token, flags). It takes its turn in the send order like any message, so
// matching is unchanged. Two uses:
//  - single copy (shared memory, single_copy_bytes() and up; kRvPull): the receiver copies
//    the payload straight out of the sender's memory (Channel::read_remote) as soon as the
//    descriptor arrives: into the posted receive, or, when none is posted yet, into a
//    buffer of its own (as an eager message would be). The send completes without its
//    receive being posted, as an eager one.
//  - rendezvous proper (point-to-point tags, rendezvous_bytes() and up, no kRvPull): an
//    early descriptor waits for its receive, so nothing large is buffered; the send
//    completes only once the receive is posted (MPI's and gloo's rule; comm.h).
// Once it has a buffer, the receiver copies the payload out when its channel can, then
// reads the token: if it still has its value (the sender did not cancel the send, so the
// payload stayed valid throughout the copy) it answers kRvDoneTag. Otherwise it answers
// kRvReadyTag and the sender streams the payload in a kRvDataTag frame, read straight into
// the buffer. The send completes on kRvDoneTag, or once its kRvDataTag frame is written.
// A receive that does not match the announced size fails with DesyncError and answers
// kRvDoneTag, as an eager message's payload would be dropped.
// Device payloads (MemoryKind::kCuda; comm.h's isend_device): always a rendezvous with
// kRvDevice in the flags and kDeviceBit in the header's `bytes`; a DeviceDescriptor (the
// channel's own encoding: for cuda_ipc a memory handle, an offset and an IPC event)
// follows the RvDescriptor. Never streamed: the receiver's channel copies it device to
// device (Channel::import_device) and answers kRvDoneTag; the sender's channel then frees
// what the descriptor held (Channel::release_device) and the send completes. The host
// rule of completion holds: point-to-point messages of rendezvous_bytes() and up wait for
// their receive; the others carry kRvPull and are imported at once, into device memory of
// the receiving channel's own when no receive is posted (Channel::allocate_device), and
// copied to the receive when it comes. A device message meeting a host receive, or the
// reverse, fails that receive with DesyncError.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdist::transport::core {

struct WireHeader {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t check[2] = {};
};
static_assert(sizeof(WireHeader) == 32);
inline constexpr size_t kHeaderWords = sizeof(WireHeader) / sizeof(uint64_t);

struct RvDescriptor {
  uint64_t id = 0;
  uint64_t address = 0;
  uint64_t token_address = 0;
  uint64_t token = 0;
  uint64_t flags = 0;
};
static_assert(sizeof(RvDescriptor) == 40);
// RvDescriptor::flags: copy the payload at once, received or not (single copy).
inline constexpr uint64_t kRvPull = 1;
// RvDescriptor::flags: the payload is device memory; a DeviceDescriptor follows.
inline constexpr uint64_t kRvDevice = 2;

// Opaque to the core: filled by the sender's channel, read by the receiver's.
inline constexpr size_t kDeviceDescriptorBytes = 192;
struct DeviceDescriptor {
  uint8_t bytes[kDeviceDescriptorBytes] = {};
};
static_assert(sizeof(DeviceDescriptor) % sizeof(uint64_t) == 0);

inline constexpr size_t kHeaderBytes = sizeof(WireHeader);
inline constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
inline constexpr uint64_t kAbortTag = ~uint64_t{0} - 1;
inline constexpr uint64_t kRvReadyTag = ~uint64_t{0} - 2;
inline constexpr uint64_t kRvDoneTag = ~uint64_t{0} - 3;
inline constexpr uint64_t kRvDataTag = ~uint64_t{0} - 4;
inline constexpr uint64_t kContextAbortTag = ~uint64_t{0} - 5;
inline constexpr uint64_t kProbeTag = ~uint64_t{0} - 6;
inline constexpr size_t kProbeBytes = 3 * sizeof(uint64_t);
// Tags from here up are the transport's own (reserved: isend/irecv refuse them).
inline constexpr uint64_t kFirstControlTag = ~uint64_t{0} - 15;
inline constexpr bool is_control_tag(uint64_t tag) { return tag >= kFirstControlTag; }
// Set in a data header's `bytes`: a rendezvous descriptor follows instead of the payload.
inline constexpr uint64_t kRendezvousBit = uint64_t{1} << 62;
// Set with kRendezvousBit: a DeviceDescriptor follows the RvDescriptor.
inline constexpr uint64_t kDeviceBit = uint64_t{1} << 61;
// Longest abort reason sent or accepted; a longer one is a protocol error.
inline constexpr uint64_t kMaxAbortReasonBytes = 4 * 1024;
// Larger than any sane message; a header claiming more means the stream is corrupt.
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 44;

}  // namespace tdist::transport::core
