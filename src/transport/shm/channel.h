// ShmChannel: the shared-memory transport's channel (core/channel.h) — two rings in shared
// memory (ring.h: one this rank writes, one the peer writes) plus the pair's unix socket.
//
// write() copies into the send ring as much as fits and publishes `head` every chunk (a
// quarter ring, at most 256 KiB), so the peer starts copying a large message while this
// side still writes it; read() copies out of the receive ring and publishes `tail` the
// same way. Two memcpys per byte, no system call on the data path. Large messages go by
// single copy instead where the kernel allows it (single_copy.h, core/wire.h).
// Slots (channel.h): in each ring's slot area (ring.h), written by the ring's sender.
// The socket carries only wake-up bytes ('w', ring.h's sleep protocol) and the end of the
// stream: the peer shutting it down (goodbye or abort) or dying closes it. read() reports
// the end of the stream only once the ring is empty, so what a dead peer wrote before it
// died is still delivered.
// A channel that also carries device memory may derive from this one (cuda_ipc's does).
// Thread-safety: channel.h; writes to the socket take a leaf mutex.
#pragma once

#include <atomic>
#include <string>

#include "tdist/thread_annotations.h"
#include "transport/core/channel.h"
#include "transport/shm/setup.h"

namespace tdist::transport::shm {

class ShmChannel : public core::Channel {
 public:
  // `single_copy_bytes`: ShmCommOptions' (0: off).
  ShmChannel(PeerLink link, size_t single_copy_bytes);

  const char* kind() const override { return "shm"; }
  std::string describe() const override;
  size_t write(const iovec* iov, size_t count, std::string* lost) override;
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override;
  size_t peek(const uint8_t** data) override;
  void consume(size_t bytes) override;
  bool readable() override;
  bool writable() override;
  size_t rendezvous_bytes() const override { return size_t{1} << 20; }
  // The constructor's, while the kernel allows single copies (single_copy.h).
  size_t single_copy_bytes() const override;
  bool read_remote(void* dest, uint64_t remote_address, size_t bytes) override;
  size_t slot_bytes() const override { return kSlotBytes; }
  void slot_post(uint64_t index, const SlotHeader& header, const void* data) override;
  const uint8_t* slot_peek(uint64_t index, SlotHeader* header) override;
  const uint8_t* slot_own(uint64_t index) override { return out_.slots->slot[index % 2].data; }
  void arm(bool want_write) override;
  void disarm() override;
  pollfd poll_for(bool want_read, bool want_write) override;
  void on_poll(short revents) override;
  void close(Deadline deadline) override;
  void shut_down() override;

 private:
  // Reloads the receiver's tail; returns the room it leaves.
  uint64_t refresh_room();
  void publish_head();
  void publish_tail();
  void wake_peer();  // one 'w' byte

  PeerLink link_;
  const RingView out_;               // link_.send
  const RingView in_;                // link_.recv
  const uint64_t out_chunk_;         // bytes copied between publications of head
  const uint64_t in_chunk_;          // bytes copied between publications of tail
  const size_t single_copy_bytes_;   // 0: off
  uint64_t head_ = 0;                // send direction: bytes written
  uint64_t seen_tail_ = 0;           // send direction: the receiver's tail, last read
  uint64_t tail_ = 0;                // receive direction: bytes consumed
  std::atomic<bool> closed_{false};  // the socket reached its end (or was shut down)

  Mutex sock_mu_;  // leaf: serialises writes to the socket
  bool shut_ TDIST_GUARDED_BY(sock_mu_) = false;
};

}  // namespace tdist::transport::shm
