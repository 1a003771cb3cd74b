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
// Memory kinds (not built yet; the door stays open): a device-memory channel (CUDA IPC)
// would take buffer descriptors {pointer, bytes, memory kind, device, stream} instead of
// host iovecs, and complete a write when the stream-ordered copy is done (an event the
// core polls like a file descriptor). Algorithms would not change: they post isend/irecv
// on the Comm with a descriptor, and the core hands the descriptor to the peer's channel
// when its kind can carry that memory, or stages through host memory otherwise.
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

namespace tdist::transport::core {

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
  // Polling (transport/polling.h): forget cached readiness, so that the next readable()
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

  // Sleeping (see above). want_write: this rank waits for room to write.
  virtual void arm(bool want_write) = 0;
  virtual void disarm() = 0;
  virtual pollfd poll_for(bool want_read, bool want_write) = 0;
  virtual void on_poll(short revents) = 0;

  // Clean close, after the goodbye frame was written: stop sending, drop what is left to
  // read (bounded by `deadline`), so the peer sees an orderly end.
  virtual void close(Deadline deadline) = 0;
  // Hard close after an abort: the peer notices within milliseconds. Never blocks.
  virtual void shut_down() = 0;
};

}  // namespace tdist::transport::core
