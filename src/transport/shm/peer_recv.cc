// Peer: the receive side — reading the ring, matching against posted receives, the
// unexpected-message queue, and the control bytes on the socket.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "net/fd.h"
#include "tdist/error.h"
#include "transport/shm/peer.h"

namespace tdist::transport::shm {
namespace {

// Larger than any sane message; a header claiming more means the ring is corrupt.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 44;

uint64_t align_up(uint64_t pos) {
  return (pos + kMessageAlign - 1) / kMessageAlign * kMessageAlign;
}

}  // namespace

std::exception_ptr Peer::desync(uint64_t tag, size_t expected, size_t actual) const {
  return std::make_exception_ptr(DesyncError(detail::str_cat(
      "rank ", self_rank_, ": message from rank ", rank_, " with tag 0x", std::hex, tag, std::dec,
      " has ", actual, " bytes, but the receive posted for it expects ", expected,
      " bytes (ranks disagree on the operation or its size)")));
}

std::shared_ptr<Op> Peer::post_recv(uint64_t tag, void* data, size_t bytes) {
  auto op = std::make_shared<Op>(rank_, false, tag, data, bytes);
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (recv_error_) {
    op->complete(recv_error_);
    return op;
  }
  auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                         [&](const Unexpected& u) { return u.tag == tag; });
  if (it == unexpected_.end()) {
    posted_.push_back(op);
  } else if (it->bytes != bytes) {
    op->complete(desync(tag, bytes, it->bytes));
    if (!it->complete) {  // still arriving: skip the rest
      incoming_.dest = nullptr;
      incoming_.unexpected = nullptr;
    }
    unexpected_.erase(it);
  } else if (it->complete) {
    if (bytes > 0) std::memcpy(data, it->data.get(), bytes);
    unexpected_.erase(it);
    op->complete(nullptr);
  } else {
    // It is the message being read: take what arrived, the rest goes straight to `data`.
    if (incoming_.got > 0) std::memcpy(data, it->data.get(), incoming_.got);
    incoming_.dest = op->data;
    incoming_.op = op;
    incoming_.unexpected = nullptr;
    unexpected_.erase(it);
  }
  return op;
}

Progress Peer::drain(std::string* lost) {
  std::lock_guard<std::mutex> lock(recv_mu_);
  Progress progress;
  if (recv_error_) return progress;
  uint64_t head = in_.control->head.load(std::memory_order_acquire);
  uint64_t budget = in_.capacity;  // fairness between peers: one ring's worth per call
  while (budget > 0 && lost->empty()) {
    if (!incoming_.active) {
      if (head < align_up(tail_) + kMessageHeaderBytes) {
        head = in_.control->head.load(std::memory_order_acquire);
      }
      if (align_up(tail_) <= head) tail_ = align_up(tail_);  // the last message's padding
      if (tail_ % kMessageAlign != 0 || head < tail_ + kMessageHeaderBytes) break;
      uint64_t header[2];
      in_.read(tail_, header, sizeof(header));
      tail_ += kMessageHeaderBytes;
      progress.moved = true;
      progress += start_message_locked(header[0], header[1], lost);
      continue;
    }
    if (head == tail_) {
      head = in_.control->head.load(std::memory_order_acquire);
      if (head == tail_) break;
    }
    const uint64_t n = std::min({head - tail_, incoming_.bytes - incoming_.got, in_chunk_, budget});
    if (incoming_.dest != nullptr) {
      in_.read(tail_, incoming_.dest + incoming_.got, static_cast<size_t>(n));
    }
    incoming_.got += n;
    tail_ += n;
    budget -= n;
    progress.moved = true;
    if (n >= in_chunk_) publish_tail_locked();
    if (incoming_.got == incoming_.bytes) progress += finish_message_locked();
  }
  publish_tail_locked();
  // After a goodbye nothing more will arrive: receives still waiting can never complete.
  if (goodbye_ && lost->empty() && (!posted_.empty() || incoming_.active) &&
      tail_ == in_.control->head.load(std::memory_order_acquire)) {
    *lost = lost_message(detail::str_cat("it destroyed its Comm while ",
                                         posted_.size() + (incoming_.active ? 1 : 0),
                                         " receive(s) from it were pending"));
  }
  return progress;
}

Progress Peer::start_message_locked(uint64_t tag, uint64_t bytes, std::string* lost) {
  if (bytes > kMaxMessageBytes) {
    *lost = lost_message(detail::str_cat("protocol error: a header announces ", bytes,
                                         " bytes (tag 0x", std::hex, tag, ")"));
    return {};
  }
  Progress progress;
  incoming_ = Incoming{};
  incoming_.active = true;
  incoming_.tag = tag;
  incoming_.bytes = bytes;
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& op) { return op->tag == tag; });
  if (it != posted_.end()) {
    std::shared_ptr<Op> op = std::move(*it);
    posted_.erase(it);
    if (op->bytes != bytes) {
      op->complete(desync(tag, op->bytes, bytes));  // the payload is skipped
      ++progress.completed;
    } else {
      incoming_.dest = op->data;
      incoming_.op = std::move(op);
    }
  } else {
    try {
      unexpected_.push_back(
          Unexpected{tag, bytes, std::make_unique_for_overwrite<uint8_t[]>(bytes), false});
    } catch (const std::bad_alloc&) {
      *lost = lost_message(detail::str_cat("out of memory buffering a ", bytes,
                                           "-byte message that arrived before its receive"));
      return progress;
    }
    incoming_.unexpected = &unexpected_.back();
    incoming_.dest = incoming_.unexpected->data.get();
  }
  if (bytes == 0) progress += finish_message_locked();
  return progress;
}

Progress Peer::finish_message_locked() {
  Incoming done = std::move(incoming_);
  incoming_ = Incoming{};
  Progress progress;
  if (done.op) {
    done.op->complete(nullptr);
    ++progress.completed;
  }
  if (done.unexpected != nullptr) done.unexpected->complete = true;
  return progress;
}

void Peer::publish_tail_locked() {
  if (tail_ == published_tail_) return;
  published_tail_ = tail_;
  RingControl* control = in_.control;
  control->tail.store(tail_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (control->writer_sleeping.load(std::memory_order_relaxed) != 0 &&
      control->writer_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    wake_peer();
  }
}

Progress Peer::read_control(std::string* lost) {
  Progress progress;
  if (!pollable()) return progress;
  std::lock_guard<std::mutex> lock(recv_mu_);
  char buffer[4096];
  while (true) {
    ssize_t n = ::recv(link_.socket.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return progress;
    progress.moved = true;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      closed_.store(true, std::memory_order_release);
      if (aborting_) {
        *lost = detail::str_cat("rank ", self_rank_, ": shared-memory peer rank ", rank_, " (pid ",
                                link_.pid, ") aborted its Comm: ", abort_text_);
      } else if (!goodbye_) {
        *lost = lost_message(error != 0 ? detail::str_cat("socket error: ", net::errno_text(error))
                                        : "its socket closed without a goodbye (the process "
                                          "exited or was killed)");
      }
      return progress;
    }
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buffer[i];
      if (aborting_) {
        if (abort_text_.size() < kMaxAbortReasonBytes) abort_text_.push_back(c);
      } else if (c == 'g') {
        goodbye_ = true;
        peer_gone_.store(true, std::memory_order_release);
      } else if (c == 'a') {
        aborting_ = true;
      } else if (c != 'w') {
        closed_.store(true, std::memory_order_release);
        *lost = lost_message(detail::str_cat("protocol error: control byte ", int{c}));
        return progress;
      }
    }
  }
}

}  // namespace tdist::transport::shm
