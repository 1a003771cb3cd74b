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

Peer::Peer(int self_rank, int rank, std::vector<net::Fd> fds, std::string address, int epoll_fd,
           size_t socket_buffer_bytes, LostHandler on_lost)
    : self_rank_(self_rank),
      rank_(rank),
      address_(std::move(address)),
      epoll_fd_(epoll_fd),
      on_lost_(std::move(on_lost)),
      lanes_(fds.size()),
      nlanes_(fds.size()) {
  TDIST_CHECK(nlanes_ >= 1 && nlanes_ <= kMaxLanes, InvalidArgument, "rank ", self_rank_, ": ",
              nlanes_, " sockets to rank ", rank_, ", expected 1..", kMaxLanes);
  for (size_t i = 0; i < nlanes_; ++i) {
    Lane& lane = lanes_[i];
    lane.fd = std::move(fds[i]);
    lane.staging.reset(new uint8_t[kStagingBytes]);
    lane.next_seq = i;
    net::set_nonblocking(lane.fd.get(), true);
    net::set_nodelay(lane.fd.get());
    if (socket_buffer_bytes > 0) {
      int size = static_cast<int>(std::min<size_t>(socket_buffer_bytes, 1 << 30));
      ::setsockopt(lane.fd.get(), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));  // best effort
      ::setsockopt(lane.fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
  }
  for (size_t i = 0; i < nlanes_; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u32 = token(rank_, i);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, lanes_[i].fd.get(), &ev) != 0) {
      int error = errno;
      for (size_t j = 0; j < i; ++j)
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, lanes_[j].fd.get(), nullptr);
      TDIST_THROW(Error, "epoll_ctl(ADD) for rank ", rank_, " failed: ", net::errno_text(error));
    }
  }
}

Peer::~Peer() {
  std::lock_guard<std::mutex> lock(interest_mu_);
  for (Lane& lane : lanes_) {
    if (lane.registered && lane.fd) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, lane.fd.get(), nullptr);
  }
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
    const size_t lane = static_cast<size_t>(send_seq_++ % nlanes_);
    op->lane = lane;
    lanes_[lane].send_queue.push_back(op);
    // Nothing ahead of us on this lane: write now, on the caller's thread.
    if (lanes_[lane].send_queue.size() == 1 && message.empty()) {
      message = flush_lane_locked(lane);
      if (!send_driver_) refresh_want_out_locked();
    }
  }
  report(message);
  return op;
}

void Peer::on_writable(size_t lane) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_driver_) return;
    message = flush_lane_locked(lane);
    refresh_want_out_locked();
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

bool Peer::sends_queued_locked() const {
  for (const Lane& lane : lanes_) {
    if (!lane.send_queue.empty()) return true;
  }
  return false;
}

void Peer::refresh_want_out_locked() {
  for (size_t i = 0; i < nlanes_; ++i) {
    set_want_out(i, !send_error_ && !lanes_[i].send_queue.empty());
  }
}

std::string Peer::flush_locked() {
  for (size_t i = 0; i < nlanes_; ++i) {
    std::string message = flush_lane_locked(i);
    if (!message.empty()) return message;
  }
  if (!send_driver_) refresh_want_out_locked();
  return {};
}

std::string Peer::flush_lane_locked(size_t lane_index) {
  if (send_error_) return {};
  Lane& lane = lanes_[lane_index];
  std::deque<std::shared_ptr<Op>>& queue = lane.send_queue;
  while (!queue.empty()) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t wanted = 0;
    for (const std::shared_ptr<Op>& op : queue) {
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
    ssize_t n = ::sendmsg(lane.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return lost(detail::str_cat("write failed: ", net::errno_text(errno)));
    }
    size_t left = static_cast<size_t>(n);
    while (!queue.empty()) {
      const std::shared_ptr<Op>& op = queue.front();
      size_t total = kHeaderBytes + op->bytes;
      size_t take = std::min(left, total - op->sent);
      op->sent += take;
      left -= take;
      if (op->sent < total) break;
      op->completion.complete(nullptr);
      queue.pop_front();
    }
    if (static_cast<size_t>(n) < wanted) break;  // the socket buffer is full
  }
  return {};
}

void Peer::cancel(Op& op) {
  if (op.is_send) {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (op.completion.done()) return;
    std::deque<std::shared_ptr<Op>>& queue = lanes_[op.lane].send_queue;
    auto it = std::find_if(queue.begin(), queue.end(),
                           [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
    if (it == queue.end()) return;
    // With several lanes an unsent message already has its number in the send order the
    // peer matches by, so it is sent in full from a copy (comm.h allows dropping a pending
    // request only after an abort, which clears the queues, so this is a corner case).
    if (op.sent == 0 && nlanes_ == 1) {
      queue.erase(it);
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
    return;
  }
  for (Lane& lane : lanes_) {
    if (lane.incoming.op.get() == &op) {
      lane.incoming.op.reset();
      lane.incoming.dest = nullptr;  // drop the rest of the payload
    }
  }
}

void Peer::fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_error_) send_error_ = error;
    for (Lane& lane : lanes_) {
      bool at_boundary = lane.send_queue.empty() || lane.send_queue.front()->sent == 0;
      for (const std::shared_ptr<Op>& op : lane.send_queue) op->completion.complete(error);
      lane.send_queue.clear();
      if (tell_peer && lane.fd) {
        if (at_boundary && !peer_gone_.load()) {
          // Best effort, never blocks: the peer learns why before it sees the shutdown.
          std::string text = reason.substr(0, kMaxAbortReasonBytes);
          uint64_t header[2] = {kAbortTag, text.size()};
          iovec iov[2] = {{header, sizeof(header)}, {text.data(), text.size()}};
          msghdr msg{};
          msg.msg_iov = iov;
          msg.msg_iovlen = 2;
          (void)::sendmsg(lane.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        ::shutdown(lane.fd.get(), SHUT_RDWR);
      }
    }
  }
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (!recv_error_) recv_error_ = error;
  for (const std::shared_ptr<Op>& op : posted_) op->completion.complete(error);
  posted_.clear();
  for (Lane& lane : lanes_) {
    if (lane.incoming.op) lane.incoming.op->completion.complete(error);
    lane.incoming = Incoming{};
  }
  unexpected_.clear();
}

void Peer::say_goodbye(Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_error_) return;
    // Sends whose Requests were dropped unfinished still belong to the streams.
    while (sends_queued_locked() && !deadline.expired()) {
      if (!flush_locked().empty()) return;
      std::vector<pollfd> fds;
      for (const Lane& lane : lanes_) {
        if (!lane.send_queue.empty()) fds.push_back({lane.fd.get(), POLLOUT, 0});
      }
      if (fds.empty()) break;
      if (::poll(fds.data(), fds.size(), deadline.poll_timeout_ms()) < 0 && errno != EINTR) return;
    }
    if (sends_queued_locked()) return;
    uint64_t header[2] = {kGoodbyeTag, 0};
    for (Lane& lane : lanes_) {
      if (!lane.fd) return;
      try {
        net::write_full(lane.fd.get(), header, sizeof(header), deadline, address_);
      } catch (const Error&) {
        return;  // the peer is gone already; nothing to tell it
      }
    }
    for (Lane& lane : lanes_) ::shutdown(lane.fd.get(), SHUT_WR);
  }
  // Read what is left (usually the peer's own goodbye), so that close() sends FIN, not RST.
  std::lock_guard<std::mutex> lock(recv_mu_);
  for (Lane& lane : lanes_) {
    while (!lane.eof) {
      ssize_t n = ::recv(lane.fd.get(), lane.staging.get(), kStagingBytes, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
    }
  }
}

}  // namespace tdist::transport::tcp
