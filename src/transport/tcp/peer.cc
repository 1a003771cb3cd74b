// Peer: construction, the send queue, cancellation, failure and clean close.
// The receive side is in peer_recv.cc.
#include "transport/tcp/peer.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "tdist/error.h"
#include "transport/tcp/wire.h"

namespace tdist::transport::tcp {
namespace {

constexpr size_t kMaxIov = 64;

}  // namespace

Peer::Peer(int self_rank, int rank, net::Fd fd, std::string address, int epoll_fd,
           size_t socket_buffer_bytes, LostHandler on_lost)
    : self_rank_(self_rank),
      rank_(rank),
      address_(std::move(address)),
      fd_(std::move(fd)),
      epoll_fd_(epoll_fd),
      on_lost_(std::move(on_lost)),
      staging_(new uint8_t[kStagingBytes]) {
  net::set_nonblocking(fd_.get(), true);
  net::set_nodelay(fd_.get());
  if (socket_buffer_bytes > 0) {
    int size = static_cast<int>(std::min<size_t>(socket_buffer_bytes, 1 << 30));
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));  // best effort
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u32 = static_cast<uint32_t>(rank_);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_.get(), &ev) != 0) {
    TDIST_THROW(Error, "epoll_ctl(ADD) for rank ", rank_, " failed: ", net::errno_text(errno));
  }
}

Peer::~Peer() {
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (registered_ && fd_) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
}

std::string Peer::lost(const std::string& reason) const {
  return detail::str_cat("rank ", self_rank_, ": connection to rank ", rank_, " (", address_,
                         ") lost: ", reason);
}

void Peer::report(const std::string& message) {
  if (!message.empty()) on_lost_(message);
}

std::shared_ptr<Op> Peer::post_send(uint64_t tag, const void* data, size_t bytes) {
  auto op = std::make_shared<Op>(this, true, tag, const_cast<void*>(data), bytes);
  op->header[0] = tag;
  op->header[1] = bytes;
  std::string message;
  if (peer_gone_.load(std::memory_order_acquire)) {
    message = lost("it already destroyed its Comm, so this send can never be received");
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_error_) {
      op->completion.complete(send_error_);
      return op;
    }
    send_queue_.push_back(op);
    // Nothing ahead of us: write now, on the caller's thread.
    if (send_queue_.size() == 1 && message.empty()) message = flush_locked();
  }
  report(message);
  return op;
}

void Peer::on_writable() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_driver_) return;
    message = flush_locked();
  }
  report(message);
}

void Peer::try_progress(const Op& op) {
  std::string message;
  if (op.is_send) {
    std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
    if (!lock.owns_lock() || send_driver_) return;
    message = flush_locked();
  } else {
    std::unique_lock<std::mutex> lock(recv_mu_, std::try_to_lock);
    if (!lock.owns_lock() || recv_driver_) return;
    message = read_locked();
  }
  report(message);
}

std::string Peer::flush_locked() {
  if (send_error_) return {};
  while (!send_queue_.empty()) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t wanted = 0;
    for (const std::shared_ptr<Op>& op : send_queue_) {
      if (count + 2 > kMaxIov) break;
      size_t sent = op->sent;
      if (sent < kHeaderBytes) {
        iov[count++] = {reinterpret_cast<uint8_t*>(op->header) + sent, kHeaderBytes - sent};
        wanted += kHeaderBytes - sent;
        sent = kHeaderBytes;
      }
      size_t done = sent - kHeaderBytes;
      if (done < op->bytes) {
        iov[count++] = {op->data + done, op->bytes - done};
        wanted += op->bytes - done;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return lost(detail::str_cat("write failed: ", net::errno_text(errno)));
    }
    size_t left = static_cast<size_t>(n);
    while (!send_queue_.empty()) {
      const std::shared_ptr<Op>& op = send_queue_.front();
      size_t total = kHeaderBytes + op->bytes;
      size_t take = std::min(left, total - op->sent);
      op->sent += take;
      left -= take;
      if (op->sent < total) break;
      op->completion.complete(nullptr);
      send_queue_.pop_front();
    }
    if (static_cast<size_t>(n) < wanted) break;  // the socket buffer is full
  }
  if (!send_driver_) set_want_out(!send_queue_.empty());
  return {};
}

void Peer::cancel(Op& op) {
  if (op.is_send) {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (op.completion.done()) return;
    auto it = std::find_if(send_queue_.begin(), send_queue_.end(),
                           [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
    if (it == send_queue_.end()) return;
    if (op.sent == 0) {
      send_queue_.erase(it);
      return;
    }
    // Partly written: the stream needs the rest, but the caller's buffer goes away.
    size_t done = op.sent > kHeaderBytes ? op.sent - kHeaderBytes : 0;
    op.owned = std::make_unique_for_overwrite<uint8_t[]>(op.bytes);
    if (op.bytes > done) std::memcpy(op.owned.get() + done, op.data + done, op.bytes - done);
    op.data = op.owned.get();
    return;
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (op.completion.done()) return;
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
  if (it != posted_.end()) {
    posted_.erase(it);
  } else if (incoming_.op.get() == &op) {
    incoming_.op.reset();
    incoming_.dest = nullptr;  // drop the rest of the payload
  }
}

void Peer::fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_error_) send_error_ = error;
    bool at_boundary = send_queue_.empty() || send_queue_.front()->sent == 0;
    for (const std::shared_ptr<Op>& op : send_queue_) op->completion.complete(error);
    send_queue_.clear();
    if (tell_peer && fd_) {
      if (at_boundary && !peer_gone_.load()) {
        // Best effort, never blocks: the peer learns why before it sees the shutdown.
        std::string text = reason.substr(0, kMaxAbortReasonBytes);
        uint64_t header[2] = {kAbortTag, text.size()};
        iovec iov[2] = {{header, sizeof(header)}, {text.data(), text.size()}};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = 2;
        (void)::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ::shutdown(fd_.get(), SHUT_RDWR);
    }
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (!recv_error_) recv_error_ = error;
  for (const std::shared_ptr<Op>& op : posted_) op->completion.complete(error);
  posted_.clear();
  if (incoming_.op) incoming_.op->completion.complete(error);
  incoming_ = Incoming{};
  unexpected_.clear();
}

void Peer::say_goodbye(Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_error_ || !fd_) return;
    // Sends whose Requests were dropped unfinished still belong to the stream.
    while (!send_queue_.empty() && !deadline.expired()) {
      if (!flush_locked().empty()) return;
      if (!send_queue_.empty() && !net::wait_fd(fd_.get(), POLLOUT, deadline)) return;
    }
    if (!send_queue_.empty()) return;
    uint64_t header[2] = {kGoodbyeTag, 0};
    try {
      net::write_full(fd_.get(), header, sizeof(header), deadline, address_);
    } catch (const Error&) {
      return;  // the peer is gone already; nothing to tell it
    }
    ::shutdown(fd_.get(), SHUT_WR);
  }
  // Read what is left (usually the peer's own goodbye), so that close() sends FIN, not RST.
  std::lock_guard<std::mutex> lock(recv_mu_);
  while (!eof_) {
    ssize_t n = ::recv(fd_.get(), staging_.get(), kStagingBytes, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
}

}  // namespace tdist::transport::tcp
