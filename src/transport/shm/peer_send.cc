// Peer: construction, the send side (writing messages into the ring), cancellation, the
// sleep flags, abort and goodbye.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/fd.h"
#include "tdist/error.h"
#include "transport/shm/peer.h"

namespace tdist::transport::shm {
namespace {

// How long say_goodbye may wait for room in the socket for its one byte.
constexpr int kGoodbyeWaitMs = 1000;

// Bytes copied between publications of head/tail: a quarter ring, at most 256 KiB, so the
// other side starts copying a large message while this side still writes it.
uint64_t chunk_of(const RingView& ring) {
  return std::min<uint64_t>(ring.capacity / 4, uint64_t{256} * 1024);
}

}  // namespace

Peer::Peer(int self_rank, int rank, PeerLink link)
    : self_rank_(self_rank),
      rank_(rank),
      link_(std::move(link)),
      out_(link_.send.ring()),
      in_(link_.recv.ring()),
      out_chunk_(chunk_of(out_)),
      in_chunk_(chunk_of(in_)) {}

std::string Peer::lost_message(const std::string& reason) const {
  return detail::str_cat("rank ", self_rank_, ": shared-memory peer rank ", rank_, " (pid ",
                         link_.pid, ") lost: ", reason);
}

std::shared_ptr<Op> Peer::post_send(uint64_t tag, const void* data, size_t bytes,
                                    std::string* lost) {
  auto op = std::make_shared<Op>(rank_, true, tag, const_cast<void*>(data), bytes);
  if (peer_gone_.load(std::memory_order_acquire)) {
    *lost = lost_message("it already destroyed its Comm, so this send can never be received");
  }
  std::lock_guard<std::mutex> lock(send_mu_);
  if (send_error_) {
    op->complete(send_error_);
    return op;
  }
  send_queue_.push_back(op);
  queued_.fetch_add(1, std::memory_order_acq_rel);
  // Nothing ahead of it: write what fits now, on the caller's thread.
  if (send_queue_.size() == 1 && lost->empty()) write_locked();
  return op;
}

Progress Peer::flush(std::string* lost) {
  std::lock_guard<std::mutex> lock(send_mu_);
  if (send_error_ || send_queue_.empty()) return {};
  Progress progress = write_locked();
  // After its goodbye the peer reads nothing more: what is still queued cannot go out.
  if (!send_queue_.empty() && peer_gone_.load(std::memory_order_acquire)) {
    *lost = lost_message(detail::str_cat("it destroyed its Comm while ", send_queue_.size(),
                                         " send(s) to it were pending"));
  }
  return progress;
}

Progress Peer::write_locked() {
  Progress progress;
  uint64_t budget = out_.capacity;  // fairness between peers: one ring's worth per call
  while (!send_queue_.empty()) {
    Op& op = *send_queue_.front();
    const uint64_t before = head_;
    const bool finished = write_op_locked(op, &budget);
    progress.moved = progress.moved || head_ != before;
    if (!finished) break;
    op.complete(nullptr);
    ++progress.completed;
    send_queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_acq_rel);
  }
  publish_head_locked();
  return progress;
}

bool Peer::write_op_locked(Op& op, uint64_t* budget) {
  const uint64_t total = footprint(op.bytes);
  const uint64_t payload_end = kMessageHeaderBytes + op.bytes;
  uint64_t room = out_.capacity - (head_ - out_.control->tail.load(std::memory_order_acquire));
  room = std::min(room, *budget);
  while (op.sent < total) {
    // The header and the padding go in whole; payload bytes go in as room allows.
    const uint64_t need = op.sent == 0            ? kMessageHeaderBytes
                          : op.sent < payload_end ? 1
                                                  : total - op.sent;
    if (room < need) {
      uint64_t now = out_.capacity - (head_ - out_.control->tail.load(std::memory_order_acquire));
      now = std::min(now, *budget);
      if (now == room) return false;
      room = now;
      continue;
    }
    uint64_t n = 0;
    if (op.sent == 0) {
      const uint64_t header[2] = {op.tag, op.bytes};
      out_.write(head_, header, sizeof(header));
      n = sizeof(header);
    } else if (op.sent < payload_end) {
      n = std::min({room, payload_end - op.sent, out_chunk_});
      out_.write(head_, op.data + (op.sent - kMessageHeaderBytes), static_cast<size_t>(n));
    } else {
      n = need;  // padding: nothing to copy
    }
    head_ += n;
    op.sent += n;
    room -= n;
    *budget -= n;
    if (n >= out_chunk_) publish_head_locked();
  }
  return true;
}

void Peer::publish_head_locked() {
  if (head_ == published_head_) return;
  published_head_ = head_;
  RingControl* control = out_.control;
  control->head.store(head_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control->reader_sleeping.load(std::memory_order_relaxed) != 0 &&
      control->reader_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    wake_peer();
  }
}

void Peer::cancel(Op& op) {
  if (op.is_send) {
    std::lock_guard<std::mutex> lock(send_mu_);
    auto it = std::find_if(send_queue_.begin(), send_queue_.end(),
                           [&](const std::shared_ptr<Op>& q) { return q.get() == &op; });
    if (it == send_queue_.end()) return;
    if (op.sent == 0) {
      send_queue_.erase(it);
      queued_.fetch_sub(1, std::memory_order_acq_rel);
    } else if (!op.owned) {
      // Part of it is in the ring already: the rest must follow, from a private copy.
      op.owned = std::make_unique_for_overwrite<uint8_t[]>(op.bytes);
      if (op.bytes > 0) std::memcpy(op.owned.get(), op.data, op.bytes);
      op.data = op.owned.get();
    }
    return;
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& q) { return q.get() == &op; });
  if (it != posted_.end()) posted_.erase(it);
  if (incoming_.op.get() == &op) {
    incoming_.op.reset();
    incoming_.dest = nullptr;  // skip the rest of the payload
  }
}

void Peer::arm_sleep() {
  in_.control->reader_sleeping.store(1, std::memory_order_relaxed);
  if (sends_queued()) out_.control->writer_sleeping.store(1, std::memory_order_relaxed);
}

bool Peer::ready() {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_error_ && !send_queue_.empty()) {
      const Op& op = *send_queue_.front();
      const uint64_t payload_end = kMessageHeaderBytes + op.bytes;
      const uint64_t need = op.sent == 0            ? kMessageHeaderBytes
                            : op.sent < payload_end ? 1
                                                    : footprint(op.bytes) - op.sent;
      const uint64_t tail = out_.control->tail.load(std::memory_order_acquire);
      if (out_.capacity - (head_ - tail) >= need) return true;
    }
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (recv_error_) return false;
  const uint64_t head = in_.control->head.load(std::memory_order_acquire);
  if (incoming_.active) return head > tail_;
  const uint64_t aligned = (tail_ + kMessageAlign - 1) / kMessageAlign * kMessageAlign;
  return head >= aligned + kMessageHeaderBytes;
}

void Peer::disarm_sleep() {
  in_.control->reader_sleeping.store(0, std::memory_order_relaxed);
  out_.control->writer_sleeping.store(0, std::memory_order_relaxed);
}

void Peer::wake_peer() {
  std::lock_guard<std::mutex> lock(sock_mu_);
  if (shut_) return;
  const char byte = 'w';
  // EAGAIN: unread bytes are there, which wake the peer just as well. Other errors: the
  // peer is gone, which its socket's EOF reports to this side's driver.
  (void)::send(link_.socket.get(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Peer::fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_error_) send_error_ = error;
    for (const std::shared_ptr<Op>& op : send_queue_) op->complete(error);
    send_queue_.clear();
    queued_.store(0, std::memory_order_release);
  }
  if (tell_peer) {
    std::lock_guard<std::mutex> lock(sock_mu_);
    if (!shut_) {
      // Best effort, never blocks: the peer learns why before it sees the shutdown.
      std::string notice(1, 'a');  // (not "a" + ...: GCC 12 -O3 warns falsely on that)
      notice.append(reason, 0, kMaxAbortReasonBytes);
      (void)::send(link_.socket.get(), notice.data(), notice.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::shutdown(link_.socket.get(), SHUT_RDWR);
      shut_ = true;
      closed_.store(true, std::memory_order_release);
    }
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (!recv_error_) recv_error_ = error;
  for (const std::shared_ptr<Op>& op : posted_) op->complete(error);
  posted_.clear();
  if (incoming_.op) incoming_.op->complete(error);
  incoming_ = Incoming{};
  unexpected_.clear();
}

void Peer::say_goodbye() {
  std::lock_guard<std::mutex> lock(sock_mu_);
  if (shut_) return;
  const int fd = link_.socket.get();
  const char byte = 'g';
  while (::send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
    if (errno == EINTR) continue;
    pollfd p{fd, POLLOUT, 0};
    if (errno != EAGAIN || ::poll(&p, 1, kGoodbyeWaitMs) <= 0) break;
  }
  ::shutdown(fd, SHUT_WR);
  // Read what the peer sent (wake bytes), so that closing does not make its reads fail.
  char sink[4096];
  while (::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
  shut_ = true;
  closed_.store(true, std::memory_order_release);
}

}  // namespace tdist::transport::shm
