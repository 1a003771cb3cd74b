// EpollLoop: epoll_wait dispatch with an eventfd to wake or stop the loop.
#include "net/epoll_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "tdist/error.h"

namespace tdist::net {
namespace {

constexpr int kMaxEventsPerBatch = 1024;

}  // namespace

EpollLoop::EpollLoop() {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) TDIST_THROW(Error, "epoll_create1 failed: ", errno_text(errno));
  event_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_) TDIST_THROW(Error, "eventfd failed: ", errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, event_.get(), &ev) != 0) {
    TDIST_THROW(Error, "epoll_ctl(ADD eventfd) failed: ", errno_text(errno));
  }
}

EpollLoop::~EpollLoop() = default;

void EpollLoop::add(int fd, uint32_t events, Handler handler) {
  uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    TDIST_THROW(Error, "epoll_ctl(ADD fd ", fd, ") failed: ", errno_text(errno));
  }
  handlers_[token] = std::make_shared<Handler>(std::move(handler));
  token_of_fd_[fd] = token;
}

void EpollLoop::modify(int fd, uint32_t events) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) TDIST_THROW(Error, "EpollLoop::modify: fd ", fd, " not added");
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
    TDIST_THROW(Error, "epoll_ctl(MOD fd ", fd, ") failed: ", errno_text(errno));
  }
}

void EpollLoop::remove(int fd) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) return;
  handlers_.erase(it->second);
  token_of_fd_.erase(it);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);  // fails only if already closed
}

void EpollLoop::run() {
  std::vector<epoll_event> events(kMaxEventsPerBatch);
  while (!stop_requested_.load(std::memory_order_acquire)) {
    int n = ::epoll_wait(epoll_.get(), events.data(), kMaxEventsPerBatch, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      TDIST_THROW(Error, "epoll_wait failed: ", errno_text(errno));
    }
    for (int i = 0; i < n; ++i) {
      uint64_t token = events[i].data.u64;
      if (token == 0) {
        uint64_t count = 0;
        while (::read(event_.get(), &count, sizeof(count)) > 0) {
        }
        continue;
      }
      auto it = handlers_.find(token);
      if (it == handlers_.end()) continue;            // removed earlier in this batch
      std::shared_ptr<Handler> handler = it->second;  // survives its own remove()
      (*handler)(events[i].events);
    }
    if (after_batch_) after_batch_();
  }
}

void EpollLoop::stop() {
  stop_requested_.store(true, std::memory_order_release);
  wake();
}

void EpollLoop::wake() {
  uint64_t one = 1;
  ssize_t rc = ::write(event_.get(), &one, sizeof(one));
  (void)rc;  // EAGAIN means the counter is already non-zero: the loop will wake anyway
}

}  // namespace tdist::net
