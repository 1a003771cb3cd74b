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

void Peer::set_want_in(size_t lane, bool want) {
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (lanes_[lane].want_in == want) return;
  lanes_[lane].want_in = want;
  update_interest_locked(lane);
}

void Peer::set_want_out(size_t lane, bool want) {
  std::lock_guard<std::mutex> lock(interest_mu_);
  if (lanes_[lane].want_out == want) return;
  lanes_[lane].want_out = want;
  update_interest_locked(lane);
}

void Peer::update_interest_locked(size_t lane_index) {
  Lane& lane = lanes_[lane_index];
  if (!lane.registered) return;
  epoll_event ev{};
  ev.events = (lane.want_in ? EPOLLIN | EPOLLRDHUP : 0u) | (lane.want_out ? EPOLLOUT : 0u);
  ev.data.u32 = token(rank_, lane_index);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, lane.fd.get(), &ev);
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
    if (send_driver_ || send_error_ || !sends_queued_locked()) finished = true;
  }
  if (!finished) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    if (op.completion.done()) return true;
    if (!recv_driver_ && !all_eof_locked() && !recv_error_) {
      recv_driver_ = recv_role = true;
      for (size_t i = 0; i < nlanes_; ++i) set_want_in(i, false);
    } else if (!op.is_send) {
      finished = true;  // another thread reads (or nobody can): sleep below
    }
  }
  if (!finished) {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (!send_driver_ && !send_error_ && sends_queued_locked()) {
      send_driver_ = send_role = true;
      for (size_t i = 0; i < nlanes_; ++i) set_want_out(i, false);
    } else if (op.is_send && !op.completion.done()) {
      finished = true;  // another thread writes (or nobody can): sleep below
    }
  }
  pollfd fds[kMaxLanes];
  bool readable[kMaxLanes] = {};  // poll() first: it saves a read when nothing is there yet
  bool any_readable = false;
  while (!finished) {
    short want[kMaxLanes] = {};
    if (send_role) {
      std::lock_guard<std::mutex> lock(send_mu_);
      message = flush_locked();
      if (!message.empty() || send_error_ || !sends_queued_locked()) {
        send_driver_ = send_role = false;  // nothing queued: the normal path takes over
        refresh_want_out_locked();
        if (op.is_send) finished = true;
      } else {
        for (size_t i = 0; i < nlanes_; ++i) {
          if (!lanes_[i].send_queue.empty()) want[i] |= POLLOUT;
        }
      }
    }
    if (recv_role && message.empty()) {
      std::lock_guard<std::mutex> lock(recv_mu_);
      for (size_t i = 0; i < nlanes_ && any_readable && message.empty(); ++i) {
        if (readable[i]) message = read_lane_locked(i);
      }
      if (any_readable && message.empty()) message = unblock_locked();
      if (!message.empty() || all_eof_locked() || recv_error_) {
        recv_driver_ = recv_role = false;
        if (!op.is_send) finished = true;
      } else {
        for (size_t i = 0; i < nlanes_; ++i) {
          if (!lanes_[i].eof && !lanes_[i].blocked) want[i] |= POLLIN;
        }
      }
    }
    if (!message.empty() || op.completion.done()) break;
    if (!recv_role && !send_role) break;
    for (size_t i = 0; i < nlanes_; ++i) {
      fds[i] = {want[i] != 0 ? lanes_[i].fd.get() : -1, want[i], 0};
    }
    const int rc = ::poll(fds, nlanes_, deadline.poll_timeout_ms());
    if (rc == 0 && deadline.expired()) break;
    any_readable = false;
    for (size_t i = 0; i < nlanes_; ++i) {
      readable[i] =
          rc > 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && (want[i] & POLLIN) != 0;
      any_readable = any_readable || readable[i];
    }
    // A hang-up reported while only writing: let the write notice it (EPIPE).
  }
  if (recv_role) {
    std::lock_guard<std::mutex> lock(recv_mu_);
    recv_driver_ = false;
    refresh_want_in_locked();
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (send_role) send_driver_ = false;
    if (!send_driver_) refresh_want_out_locked();
  }
  report(message);
  return op.completion.sleep_until_done(deadline);
}

}  // namespace tdist::transport::tcp
