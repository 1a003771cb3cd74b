// ShmChannel: copies through the rings, the sleep flags and the wake-up socket.
#include "transport/shm/channel.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "tdist/error.h"
#include "transport/shm/single_copy.h"

namespace tdist::transport::shm {
namespace {

// Bytes copied between publications: a quarter ring, at most 256 KiB.
uint64_t chunk_of(const RingView& ring) {
  return std::min<uint64_t>(ring.capacity / 4, uint64_t{256} * 1024);
}

}  // namespace

ShmChannel::ShmChannel(PeerLink link, size_t single_copy_bytes)
    : link_(std::move(link)),
      out_(link_.send.ring()),
      in_(link_.recv.ring()),
      out_chunk_(chunk_of(out_)),
      in_chunk_(chunk_of(in_)),
      // Single copy reads the peer's memory by its pid, which needs one this process sees.
      single_copy_bytes_(link_.pid > 0 ? single_copy_bytes : 0) {}

size_t ShmChannel::single_copy_bytes() const {
  return single_copy_allowed() ? single_copy_bytes_ : 0;
}

bool ShmChannel::read_remote(void* dest, uint64_t remote_address, size_t bytes) {
  return single_copy_bytes_ > 0 && single_copy_allowed() &&
         single_copy_read(link_.pid, dest, remote_address, bytes);
}

std::string ShmChannel::describe() const { return detail::str_cat("shm pid ", link_.pid); }

size_t ShmChannel::write(const iovec* iov, size_t count, std::string*) {
  size_t wanted = 0;
  for (size_t i = 0; i < count; ++i) wanted += iov[i].iov_len;
  uint64_t room = out_.capacity - (head_ - seen_tail_);
  if (room < wanted) room = refresh_room();
  if (wanted <= room && wanted <= out_chunk_) {  // a short message: one publication
    for (size_t i = 0; i < count; ++i) {
      out_.write(head_, iov[i].iov_base, iov[i].iov_len);
      head_ += iov[i].iov_len;
    }
    publish_head();
    return wanted;
  }
  size_t written = 0;
  uint64_t unpublished = 0;
  for (size_t i = 0; i < count && room > 0; ++i) {
    const auto* src = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0 && room > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>({left, room, out_chunk_}));
      out_.write(head_, src, n);
      head_ += n;
      src += n;
      left -= n;
      room -= n;
      written += n;
      unpublished += n;
      if (unpublished >= out_chunk_) {
        publish_head();
        unpublished = 0;
      }
    }
  }
  publish_head();
  return written;
}

size_t ShmChannel::read(const iovec* iov, size_t count, bool* eof, std::string*) {
  uint64_t avail = in_.control->head.load(std::memory_order_acquire) - tail_;
  if (avail == 0) {
    if (!closed_.load(std::memory_order_acquire)) return 0;
    // The peer's last bytes were published before its socket closed.
    avail = in_.control->head.load(std::memory_order_acquire) - tail_;
    if (avail == 0) {
      *eof = true;
      return 0;
    }
  }
  size_t got = 0;
  uint64_t unpublished = 0;
  for (size_t i = 0; i < count && avail > 0; ++i) {
    auto* dst = static_cast<uint8_t*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0 && avail > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>({left, avail, in_chunk_}));
      in_.read(tail_, dst, n);
      tail_ += n;
      dst += n;
      left -= n;
      avail -= n;
      got += n;
      unpublished += n;
      if (unpublished >= in_chunk_) {
        publish_tail();
        unpublished = 0;
      }
    }
  }
  publish_tail();
  return got;
}

size_t ShmChannel::peek(const uint8_t** data) {
  const uint64_t avail = in_.control->head.load(std::memory_order_acquire) - tail_;
  if (avail == 0) return 0;
  const auto at = static_cast<size_t>(tail_ % in_.capacity);
  *data = in_.data + at;
  return static_cast<size_t>(std::min<uint64_t>(avail, in_.capacity - at));
}

void ShmChannel::consume(size_t bytes) {
  tail_ += bytes;
  publish_tail();
}

bool ShmChannel::readable() {
  return in_.control->head.load(std::memory_order_acquire) != tail_ ||
         closed_.load(std::memory_order_acquire);
}

bool ShmChannel::writable() { return head_ - seen_tail_ < out_.capacity || refresh_room() > 0; }

uint64_t ShmChannel::refresh_room() {
  seen_tail_ = out_.control->tail.load(std::memory_order_acquire);
  return out_.capacity - (head_ - seen_tail_);
}

void ShmChannel::publish_head() {
  RingControl* control = out_.control;
  if (control->head.load(std::memory_order_relaxed) == head_) return;
  control->head.store(head_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control->reader_sleeping.load(std::memory_order_relaxed) != 0 &&
      control->reader_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    wake_peer();
  }
}

void ShmChannel::publish_tail() {
  RingControl* control = in_.control;
  if (control->tail.load(std::memory_order_relaxed) == tail_) return;
  control->tail.store(tail_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control->writer_sleeping.load(std::memory_order_relaxed) != 0 &&
      control->writer_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    wake_peer();
  }
}

void ShmChannel::slot_post(uint64_t index, const SlotHeader& header, const void* data) {
  Slot& slot = out_.slots->slot[index % 2];
  if (header.bytes > 0) std::memcpy(slot.data, data, header.bytes);
  slot.tag = header.tag;
  slot.w0 = header.w0;
  slot.w1 = header.w1;
  slot.bytes = header.bytes;
  slot.index.store(index, std::memory_order_release);
  // As publish_head: the peer's core may sleep armed for this slot.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  RingControl* control = out_.control;
  if (control->reader_sleeping.load(std::memory_order_relaxed) != 0 &&
      control->reader_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    wake_peer();
  }
}

const uint8_t* ShmChannel::slot_peek(uint64_t index, SlotHeader* header) {
  const Slot& slot = in_.slots->slot[index % 2];
  if (slot.index.load(std::memory_order_acquire) != index) return nullptr;
  if (header != nullptr) *header = {slot.tag, slot.w0, slot.w1, slot.bytes};
  return slot.data;
}

void ShmChannel::arm(bool want_write) {
  in_.control->reader_sleeping.store(1, std::memory_order_relaxed);
  if (want_write) out_.control->writer_sleeping.store(1, std::memory_order_relaxed);
}

void ShmChannel::disarm() {
  in_.control->reader_sleeping.store(0, std::memory_order_relaxed);
  out_.control->writer_sleeping.store(0, std::memory_order_relaxed);
}

pollfd ShmChannel::poll_for(bool, bool) {
  // The socket reports wake-ups and the end of the stream, whatever this side waits for.
  return {closed_.load(std::memory_order_acquire) ? -1 : link_.socket.get(), POLLIN, 0};
}

void ShmChannel::on_poll(short revents) {
  if (revents == 0 || closed_.load(std::memory_order_acquire)) return;
  char buffer[256];
  while (true) {
    const ssize_t n = ::recv(link_.socket.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) continue;  // wake-up bytes: their only job was to end the poll
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    closed_.store(true, std::memory_order_release);  // EOF or error: the peer is gone
    return;
  }
}

void ShmChannel::wake_peer() {
  MutexLock lock(sock_mu_);
  if (shut_) return;
  const char byte = 'w';
  // EAGAIN: unread bytes are there, which wake the peer just as well. Other errors: the
  // peer is gone, which its socket's end reports to this side.
  (void)::send(link_.socket.get(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void ShmChannel::close(Deadline) {
  MutexLock lock(sock_mu_);
  if (shut_) return;
  // What the peer sent (wake bytes) is dropped, so that closing does not make its reads fail.
  net::end_sending(link_.socket.get());
  shut_ = true;
}

void ShmChannel::shut_down() {
  MutexLock lock(sock_mu_);
  if (shut_) return;
  ::shutdown(link_.socket.get(), SHUT_RDWR);
  shut_ = true;
}

}  // namespace tdist::transport::shm
