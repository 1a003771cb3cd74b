// Peer: the receive side — reading, header parsing, matching against posted receives,
// the unexpected-message queue, and the control frames (goodbye, abort notice).
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "net/fd.h"
#include "tdist/error.h"
#include "transport/tcp/peer.h"
#include "transport/tcp/wire.h"

namespace tdist::transport::tcp {
namespace {

// Larger than any sane message; a header claiming more means the stream is corrupt.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 44;
// A direct read at least this long is followed by the next header only (read_locked).
constexpr size_t kDirectOnlyBytes = 32 * 1024;

}  // namespace

std::shared_ptr<Op> Peer::post_recv(uint64_t tag, void* data, size_t bytes) {
  auto op = std::make_shared<Op>(this, false, tag, data, bytes);
  std::string message;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (recv_error_) {
      op->completion.complete(recv_error_);
      return op;
    }
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it == unexpected_.end()) {
      posted_.push_back(op);
      if (goodbye_) {
        message = lost("it destroyed its Comm, so this receive can never complete");
      }
    } else if (it->bytes != bytes) {
      op->completion.complete(desync(tag, bytes, it->bytes));
      if (!it->complete) {  // still arriving: drop the rest
        incoming_.dest = nullptr;
        incoming_.unexpected = nullptr;
      }
      unexpected_.erase(it);
    } else if (it->complete) {
      if (bytes > 0) std::memcpy(data, it->data.get(), bytes);
      unexpected_.erase(it);
      op->completion.complete(nullptr);
    } else {
      // It is the message being read: take what arrived, the rest goes straight to `data`.
      if (incoming_.got > 0) std::memcpy(data, it->data.get(), incoming_.got);
      incoming_.dest = op->data;
      incoming_.op = op;
      incoming_.unexpected = nullptr;
      unexpected_.erase(it);
    }
  }
  report(message);
  return op;
}

void Peer::on_readable() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (recv_driver_) return;  // an event fetched before the waiter took over
    message = read_locked();
  }
  report(message);
}

std::exception_ptr Peer::desync(uint64_t tag, size_t expected, size_t actual) const {
  return std::make_exception_ptr(DesyncError(detail::str_cat(
      "rank ", self_rank_, ": message from rank ", rank_, " with tag 0x", std::hex, tag, std::dec,
      " has ", actual, " bytes, but the receive posted for it expects ", expected,
      " bytes (ranks disagree on the operation or its size)")));
}

void Peer::stop_polling() {
  eof_ = true;
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (registered_) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
  registered_ = false;
}

std::string Peer::read_locked() {
  size_t total = 0;
  while (!eof_ && !recv_error_) {
    std::string message = consume_staged_locked();
    if (!message.empty()) return message;
    if (staged_begin_ > 0) {  // keep a partial header at the front
      std::memmove(staging_.get(), staging_.get() + staged_begin_, staged_end_ - staged_begin_);
      staged_end_ -= staged_begin_;
      staged_begin_ = 0;
    }
    iovec iov[2];
    int count = 0;
    size_t direct = 0;
    if (incoming_.active && incoming_.dest != nullptr) {
      direct = incoming_.bytes - incoming_.got;
      iov[count++] = {incoming_.dest + incoming_.got, direct};
    }
    // Behind a large direct read, read only the next header: its payload then goes
    // straight to its own receive (when posted) instead of through staging and a copy.
    size_t room = kStagingBytes - staged_end_;
    if (direct >= kDirectOnlyBytes) room = std::min(room, kHeaderBytes);
    iov[count++] = {staging_.get() + staged_end_, room};
    const size_t wanted = direct + room;
    ssize_t n = ::readv(fd_.get(), iov, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      int error = errno;
      stop_polling();
      if (goodbye_) return {};  // e.g. ECONNRESET after a clean goodbye
      return lost(detail::str_cat("read failed: ", net::errno_text(error)));
    }
    if (n == 0) {
      stop_polling();
      if (goodbye_) return {};
      return lost(
          "the peer closed the connection without a goodbye (its process exited or was "
          "killed?)");
    }
    size_t got = static_cast<size_t>(n);
    size_t to_direct = std::min(got, direct);
    if (to_direct > 0) {
      incoming_.got += to_direct;
      if (incoming_.got == incoming_.bytes) {
        message = finish_message_locked();
        if (!message.empty()) return message;
      }
    }
    staged_end_ += got - to_direct;
    total += got;
    if (got < wanted || total >= kReadBudget) return consume_staged_locked();
  }
  return {};
}

std::string Peer::consume_staged_locked() {
  while (true) {
    size_t avail = staged_end_ - staged_begin_;
    if (incoming_.active) {
      size_t take = std::min(avail, incoming_.bytes - incoming_.got);
      if (incoming_.dest != nullptr && take > 0) {
        std::memcpy(incoming_.dest + incoming_.got, staging_.get() + staged_begin_, take);
      }
      incoming_.got += take;
      staged_begin_ += take;
      if (incoming_.got < incoming_.bytes) return {};
      std::string message = finish_message_locked();
      if (!message.empty()) return message;
      continue;
    }
    if (avail < kHeaderBytes) {
      if (avail == 0) staged_begin_ = staged_end_ = 0;
      return {};
    }
    WireHeader header;
    std::memcpy(&header, staging_.get() + staged_begin_, kHeaderBytes);
    staged_begin_ += kHeaderBytes;
    std::string message = start_message_locked(header.tag, header.bytes);
    if (!message.empty()) return message;
  }
}

std::string Peer::start_message_locked(uint64_t tag, uint64_t bytes) {
  if (tag == kGoodbyeTag) {
    goodbye_ = true;
    peer_gone_.store(true, std::memory_order_release);
    if (!posted_.empty()) {
      return lost(detail::str_cat("it destroyed its Comm while ", posted_.size(),
                                  " receive(s) from it were pending"));
    }
    return {};
  }
  if (bytes > kMaxMessageBytes || (tag == kAbortTag && bytes > kMaxAbortReasonBytes)) {
    return lost(detail::str_cat("protocol error: a header announces ", bytes, " bytes (tag 0x",
                                std::hex, tag, ")"));
  }
  incoming_ = Incoming{};
  incoming_.active = true;
  incoming_.tag = tag;
  incoming_.bytes = bytes;
  if (tag == kAbortTag) {
    incoming_.control.resize(bytes);
    incoming_.dest = reinterpret_cast<uint8_t*>(incoming_.control.data());
  } else {
    auto it = std::find_if(posted_.begin(), posted_.end(),
                           [&](const std::shared_ptr<Op>& op) { return op->tag == tag; });
    if (it != posted_.end()) {
      std::shared_ptr<Op> op = std::move(*it);
      posted_.erase(it);
      if (op->bytes != bytes) {
        op->completion.complete(desync(tag, op->bytes, bytes));  // payload is dropped
      } else {
        incoming_.dest = op->data;
        incoming_.op = std::move(op);
      }
    } else {
      try {
        unexpected_.push_back(
            Unexpected{tag, bytes, std::make_unique_for_overwrite<uint8_t[]>(bytes), false});
      } catch (const std::bad_alloc&) {
        return lost(detail::str_cat("out of memory buffering a ", bytes,
                                    "-byte message that arrived before its receive"));
      }
      incoming_.unexpected = &unexpected_.back();
      incoming_.dest = incoming_.unexpected->data.get();
    }
  }
  if (bytes == 0) return finish_message_locked();
  return {};
}

std::string Peer::finish_message_locked() {
  Incoming done = std::move(incoming_);
  incoming_ = Incoming{};
  if (done.tag == kAbortTag) {
    stop_polling();
    return detail::str_cat("rank ", self_rank_, ": rank ", rank_, " (", address_,
                           ") aborted its Comm: ", done.control);
  }
  if (done.op) done.op->completion.complete(nullptr);
  if (done.unexpected != nullptr) done.unexpected->complete = true;
  return {};
}

}  // namespace tdist::transport::tcp
