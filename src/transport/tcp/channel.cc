// TcpChannel: sendmsg/readv on one non-blocking socket.
#include "transport/tcp/channel.h"

#include <sys/socket.h>

#include <cerrno>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::transport::tcp {

TcpChannel::TcpChannel(net::Fd fd, std::string address, size_t socket_buffer_bytes)
    : fd_(std::move(fd)), address_(std::move(address)) {
  net::prepare_stream(fd_.get(), socket_buffer_bytes);
}

size_t TcpChannel::write(const iovec* iov, size_t count, std::string* lost) {
  size_t wanted = 0;
  for (size_t i = 0; i < count; ++i) wanted += iov[i].iov_len;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = count;
  while (true) {
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      if (static_cast<size_t>(n) < wanted) writable_.store(false, std::memory_order_relaxed);
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      writable_.store(false, std::memory_order_relaxed);
      return 0;
    }
    *lost = detail::str_cat("write failed: ", net::errno_text(errno));
    return 0;
  }
}

size_t TcpChannel::read(const iovec* iov, size_t count, bool* eof, std::string* lost) {
  size_t wanted = 0;
  for (size_t i = 0; i < count; ++i) wanted += iov[i].iov_len;
  while (true) {
    const ssize_t n = ::readv(fd_.get(), iov, static_cast<int>(count));
    if (n > 0) {
      if (static_cast<size_t>(n) < wanted) readable_.store(false, std::memory_order_relaxed);
      return static_cast<size_t>(n);
    }
    if (n == 0) {
      *eof = true;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      readable_.store(false, std::memory_order_relaxed);
      return 0;
    }
    *lost = detail::str_cat("read failed: ", net::errno_text(errno));
    return 0;
  }
}

pollfd TcpChannel::poll_for(bool want_read, bool want_write) {
  const short events =
      static_cast<short>((want_read ? POLLIN | POLLRDHUP : 0) | (want_write ? POLLOUT : 0));
  return {fd_.get(), events, 0};
}

void TcpChannel::on_poll(short revents) {
  if ((revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    readable_.store(true, std::memory_order_relaxed);
  }
  // A hang-up reported while writing: let the write notice it (EPIPE).
  if ((revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
    writable_.store(true, std::memory_order_relaxed);
  }
}

void TcpChannel::close(Deadline) {
  // What is left to read (usually the peer's own goodbye) is dropped, so that close()
  // sends FIN, not RST.
  net::end_sending(fd_.get());
}

void TcpChannel::shut_down() { ::shutdown(fd_.get(), SHUT_RDWR); }

}  // namespace tdist::transport::tcp
