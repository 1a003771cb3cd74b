// Channel: what a transport provides to the core — a byte pipe to one peer.
//
// The core (engine.h) owns matching, requests, framing, abort and deadlines; a transport
// only moves bytes. A Channel is one ordered, reliable byte stream in each direction
// between this rank and one peer (a TCP socket; a pair of shared-memory rings with a unix
// socket for wake-ups). It never blocks: write() takes what fits now, read() returns what
// is there now. The core writes framed messages (wire.h) and parses them.
//
// Readiness: the core asks readable()/writable() before moving bytes (cheap hints; they may
// be optimistic, never pessimistic after a poll reported the fd ready). To sleep, the core
// calls arm(want_write), issues a seq_cst fence, checks readable()/writable() once more,
// then blocks in poll() on pollfd(want_write) of every channel (plus its own eventfd), and
// hands the result to on_poll(). A channel whose data does not come through a file
// descriptor (shared memory) uses arm() to ask its peer for a wake-up byte on its socket.
//
// End of stream: read() sets *eof once every byte the peer sent has been read and the peer
// closed its side (or died). Errors that break the pipe are reported through *lost (a
// reason without the rank prefix; the core adds "rank R: connection to rank P (...) lost:").
//
// Memory kinds: a channel that carries device memory (cuda_ipc) offers a DeviceChannel
// (device(); null for host channels) and moves device payloads by descriptor (wire.h): the
// sender's channel describes the buffer (export_device: e.g. an IPC memory handle and an
// IPC event recorded after the work that produced it), the core sends the descriptor as a
// rendezvous, the receiver's channel copies device to device (import_device, complete when
// it returns) and the core answers; the sender's channel then frees what the descriptor
// held (release_device). A device channel is a host channel too (cuda_ipc's is a shm
// channel that also carries device memory), not a wrapper that forwards to one.
// Host frames (headers, control, host payloads) still go through write/read. Algorithms do
// not change: they post isend_device/irecv_device on the Comm (comm.h).
//
// Thread-safety: the core serialises each direction (all writes under one lock, all reads
// under another); the two directions and the sleep calls may run concurrently.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tdist/deadline.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {

// The device-memory calls of a channel that carries device memory (Channel::device()).
// export_device throws Error when `data` cannot be shared (not device memory of this
// channel's device; a CUDA error), before anything is sent. import_device returns "" once
// `bytes` are in `dest`, else why not (the Comm aborts). Thread-safety: as Channel's; the
// send side (export, release) and the receive side (import, allocate, copy, free) may run
// concurrently.
class DeviceChannel {
 public:
  virtual ~DeviceChannel() = default;

  virtual void export_device(const void* data, size_t bytes, DeviceDescriptor* out) = 0;
  virtual std::string import_device(void* dest, size_t bytes,
                                    const DeviceDescriptor& descriptor) = 0;
  virtual void release_device(const DeviceDescriptor& descriptor) = 0;
  // Device memory of the channel's own for a device payload that arrives before its
  // receive (wire.h: collective messages are taken at once, as eager ones): the core
  // imports it there, later copies it to the receive (copy_device: "" or why not) and
  // frees it. allocate_device returns null when it cannot (the Comm aborts).
  virtual void* allocate_device(size_t bytes) = 0;
  virtual void free_device(void* data, size_t bytes) = 0;
  virtual std::string copy_device(void* dest, const void* src, size_t bytes) = 0;
};

class Channel {
 public:
  virtual ~Channel() = default;

  // The kind ("tcp", "shm") and where the peer is ("tcp 10.0.0.2:41234", "shm pid 812").
  virtual const char* kind() const = 0;
  virtual std::string describe() const = 0;

  // Writes a prefix of iov[0..count) without blocking; returns the bytes taken (0 when
  // there is no room). Sets *lost when the pipe is broken.
  virtual size_t write(const iovec* iov, size_t count, std::string* lost) = 0;
  // Reads up to the total of iov[0..count) without blocking; returns the bytes read. Sets
  // *eof at the end of the peer's stream, *lost when the pipe broke.
  virtual size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) = 0;

  // Zero-copy reading, for channels whose bytes lie in memory they own (a shared-memory
  // ring): peek points `*data` at the readable bytes that lie contiguous there, without
  // consuming them, and returns how many (0: none, or the channel cannot; the default).
  // consume(n) then takes the first n of them. The core uses it for short messages whose
  // receive is posted: header and payload straight from the ring to the caller's buffer.
  virtual size_t peek(const uint8_t** /*data*/) { return 0; }
  virtual void consume(size_t /*bytes*/) {}

  virtual bool readable() = 0;
  virtual bool writable() = 0;
  // Whether bytes write() took still wait inside the channel for room in the pipe (a TLS
  // channel's gathered records): the core then calls write() again, with no iovecs if it
  // has nothing more, whenever writable(), until this is false. Default: never.
  virtual bool holds_unsent() { return false; }
  // Polling (core/polling.h): forget cached readiness, so that the next readable()
  // and writable() let the core try the pipe itself (for a socket: one failed syscall).
  // Channels whose readable()/writable() look at the pipe directly need nothing.
  virtual void refresh() {}

  // Large messages (wire.h): point-to-point sends of at least rendezvous_bytes() wait for
  // their receive (nothing large is buffered); sends of at least single_copy_bytes() (0:
  // never) are copied straight out of this process's memory by the peer's read_remote.
  virtual size_t rendezvous_bytes() const = 0;
  virtual size_t single_copy_bytes() const { return 0; }
  // Copies `bytes` at `remote_address` in the peer's memory to `dest`. False when this
  // channel cannot (the default) or the kernel refused; the core then has the payload
  // streamed through the channel.
  virtual bool read_remote(void* /*dest*/, uint64_t /*remote_address*/, size_t /*bytes*/) {
    return false;
  }

  // The device memory this channel also carries (see above), or null: a host channel.
  virtual DeviceChannel* device() { return nullptr; }

  // Slots (shared memory; Engine::slot_gather): memory both ranks map, outside the byte
  // stream, for the small exchanges of latency-bound collectives. Each direction has two
  // slots: this rank's k-th exchange (`index` k, from 1, one more each time) goes in slot
  // k % 2, which the peer has read by the time this rank read the peer's k - 1 (the core
  // posts k only after that). slot_bytes(): the largest payload (0: no slots; the default).
  // slot_post writes the payload and the header, publishes them, and wakes a peer whose
  // core sleeps armed (arm()); slot_peek returns the peer's exchange `index` (its header in
  // *header when not null) once it is published, else null; slot_own is this rank's own
  // payload of exchange `index`. slot_post and slot_own from one thread at a time;
  // slot_peek from any.
  struct SlotHeader {
    uint64_t tag = 0;
    uint64_t w0 = 0;  // the fingerprint (wire.h)
    uint64_t w1 = 0;
    uint64_t bytes = 0;
  };
  virtual size_t slot_bytes() const { return 0; }
  virtual void slot_post(uint64_t /*index*/, const SlotHeader& /*header*/, const void* /*data*/) {}
  virtual const uint8_t* slot_peek(uint64_t /*index*/, SlotHeader* /*header*/) { return nullptr; }
  virtual const uint8_t* slot_own(uint64_t /*index*/) { return nullptr; }

  // Sleeping (see above). want_write: this rank waits for room to write.
  virtual void arm(bool want_write) = 0;
  virtual void disarm() = 0;
  virtual pollfd poll_for(bool want_read, bool want_write) = 0;
  virtual void on_poll(short revents) = 0;

  // Lazy connections (tcp/lazy_mesh.h): a channel may exist before its connection. The
  // core calls activate() when the first operation for the peer is posted (the connection
  // is then made in the background; until it is, the channel reads and writes nothing and
  // its pollfd wakes the core when it is in), and says goodbye only over a connected()
  // channel. A failed connection is reported as lost by read() and write().
  // A peer found gone before the pair ever connected (it destroyed its Comm, or nothing
  // listens at its address any more) reads as an end of stream with departed() true: the
  // core takes it as that peer's goodbye (a receive from any rank goes on; an exchange
  // with that peer fails), as a connected peer's goodbye frame would be.
  // leave(): this rank destroys its Comm cleanly, before its goodbye: a connection in the
  // making is finished (by `deadline`) so that the goodbye goes over it, and the peer's
  // later dials are answered that this rank left.
  virtual void activate() {}
  virtual bool connected() const { return true; }
  virtual bool departed() const { return false; }
  virtual void leave(Deadline /*deadline*/) {}

  // Clean close, after the goodbye frame was written: stop sending, drop what is left to
  // read (bounded by `deadline`), so the peer sees an orderly end.
  virtual void close(Deadline deadline) = 0;
  // Hard close after an abort: the peer notices within milliseconds. Never blocks.
  virtual void shut_down() = 0;
};

}  // namespace tdist::transport::core
