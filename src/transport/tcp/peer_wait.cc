// Peer: waiting for a request on the caller's thread. The waiter "drives" the socket
// (blocks in poll() on it and does the I/O itself) while the I/O thread's epoll interest
// in the driven directions is switched off; the I/O thread takes over again when the
// waiter leaves. This saves a thread hand-off (two context switches) per message.
//
// A waiter drives its own op's direction and, when nobody else does, the other one too:
// waiting for a receive it also flushes queued sends, waiting for a send it also reads.
// So a pipelined exchange (sends queued behind a full socket buffer, receives arriving)
// runs in one thread's poll loop, with no wake-up of the I/O thread. The send role is
// held only while sends are queued: a send posted later by another thread then goes the
// normal way (written at once, the rest flushed by the I/O thread), never waiting for a
// driver that does not poll for POLLOUT.
#include <poll.h>
#include <sys/epoll.h>

#include "transport/tcp/peer.h"

namespace tdist::transport::tcp {

void Peer::set_want_in(bool want) {
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (want_in_ == want) return;
  want_in_ = want;
  update_interest_locked();
}

void Peer::set_want_out(bool want) {
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (want_out_ == want) return;
  want_out_ = want;
  update_interest_locked();
}

void Peer::update_interest_locked() {
  if (!registered_) return;
  epoll_event ev{};
  ev.events = (want_in_ ? EPOLLIN | EPOLLRDHUP : 0u) | (want_out_ ? EPOLLOUT : 0u);
  ev.data.u32 = static_cast<uint32_t>(rank_);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_.get(), &ev);
}

bool Peer::wait_for(Op& op, Deadline deadline) {
  if (op.completion.done()) return true;
  std::string message;
  bool recv_role = false;
  bool send_role = false;
  bool finished = false;  // the op completed, or its direction can make no progress
  if (op.is_send) {
    // A send another thread writes for: sleep without touching the read side.
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_driver_ || send_error_ || send_queue_.empty()) finished = true;
  }
  if (!finished) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (op.completion.done()) return true;
    if (!recv_driver_ && !eof_ && !recv_error_) {
      recv_driver_ = recv_role = true;
      set_want_in(false);
    } else if (!op.is_send) {
      finished = true;  // another thread reads (or nobody can): sleep below
    }
  }
  if (!finished) {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_driver_ && !send_error_ && !send_queue_.empty()) {
      send_driver_ = send_role = true;
      set_want_out(false);
    } else if (op.is_send && !op.completion.done()) {
      finished = true;  // another thread writes (or nobody can): sleep below
    }
  }
  bool readable = false;  // poll() first: it saves a read when nothing is there yet
  while (!finished) {
    if (send_role) {
      std::lock_guard<std::mutex> lock(send_mu_);
      message = flush_locked();
      if (!message.empty() || send_error_ || send_queue_.empty()) {
        send_driver_ = send_role = false;  // nothing queued: the normal path takes over
        if (op.is_send) finished = true;
      }
    }
    if (recv_role && readable && message.empty()) {
      std::lock_guard<std::mutex> lock(recv_mu_);
      message = read_locked();
      if (!message.empty() || eof_ || recv_error_) {
        recv_driver_ = recv_role = false;
        if (!op.is_send) finished = true;
      }
    }
    if (!message.empty() || op.completion.done()) break;
    if (!recv_role && !send_role) break;
    pollfd p{fd_.get(), static_cast<short>((recv_role ? POLLIN : 0) | (send_role ? POLLOUT : 0)),
             0};
    const int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc == 0 && deadline.expired()) break;
    readable = rc > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    // A hang-up reported while only writing: let the write notice it (EPIPE).
  }
  if (recv_role) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    recv_driver_ = false;
    if (!eof_) set_want_in(true);
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_role) send_driver_ = false;
    if (!send_driver_) set_want_out(!send_queue_.empty() && !send_error_);
  }
  report(message);
  return op.completion.sleep_until_done(deadline);
}

}  // namespace tdist::transport::tcp
