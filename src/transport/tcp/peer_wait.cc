// Peer: waiting for a request on the caller's thread. The waiter "drives" its direction
// (blocks in poll() on the socket and does the I/O itself) while the I/O thread's epoll
// interest in that direction is switched off; the I/O thread takes over again when the
// waiter leaves. This saves a thread hand-off (two context switches) per message.
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
  return op.is_send ? drive_send(op, deadline) : drive_recv(op, deadline);
}

bool Peer::drive_recv(Op& op, Deadline deadline) {
  std::string message;
  {
    std::unique_lock<std::mutex> lock(recv_mu_);
    if (op.completion.done()) return true;
    if (!recv_driver_ && !eof_ && !recv_error_) {
      recv_driver_ = true;
      set_want_in(false);
      while (true) {
        // Only this thread reads now, so nobody else can complete `op` while we sleep;
        // an abort shuts the socket down, which wakes us. (poll() first: it returns at
        // once when bytes are already there, and saves a read when they are not.)
        lock.unlock();
        pollfd p{fd_.get(), POLLIN, 0};
        int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
        lock.lock();
        message = read_locked();
        if (!message.empty() || op.completion.done() || eof_ || recv_error_) break;
        if (rc == 0 && deadline.expired()) break;
      }
      recv_driver_ = false;
      if (!eof_) set_want_in(true);
    }
  }
  report(message);
  return op.completion.sleep_until_done(deadline);
}

bool Peer::drive_send(Op& op, Deadline deadline) {
  std::string message;
  {
    std::unique_lock<std::mutex> lock(send_mu_);
    if (op.completion.done()) return true;
    if (!send_driver_ && !send_error_) {
      send_driver_ = true;
      set_want_out(false);
      while (true) {
        message = flush_locked();
        if (!message.empty() || op.completion.done() || send_error_) break;
        lock.unlock();
        pollfd p{fd_.get(), POLLOUT, 0};
        int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
        lock.lock();
        if (rc == 0 && deadline.expired()) break;
      }
      send_driver_ = false;
      set_want_out(!send_queue_.empty());
    }
  }
  report(message);
  return op.completion.sleep_until_done(deadline);
}

}  // namespace tdist::transport::tcp
