// Whole-buffer reads and writes on non-blocking sockets, bounded by a deadline; the end of
// sending.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::net {

bool wait_fd(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;  // ready, or an error/hangup the next call will report
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;  // poll rounds its timeout down; try again for the last millisecond
    }
    if (errno != EINTR) TDIST_THROW(Error, "poll failed: ", errno_text(errno));
  }
}

void read_full(int fd, void* data, size_t size, Deadline deadline, std::string_view peer) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::recv(fd, p + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      TDIST_THROW(PeerError, "connection to ", peer, " closed by the peer (read ", done, " of ",
                  size, " bytes)");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      TDIST_THROW(PeerError, "reading from ", peer, " failed: ", errno_text(errno));
    }
    if (!wait_fd(fd, POLLIN, deadline)) {
      TDIST_THROW(TimeoutError, "timed out reading from ", peer, " (", done, " of ", size,
                  " bytes arrived)");
    }
  }
}

void write_full(int fd, const void* data, size_t size, Deadline deadline, std::string_view peer) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, p + done, size - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      TDIST_THROW(PeerError, "writing to ", peer, " failed: ", errno_text(errno));
    }
    if (!wait_fd(fd, POLLOUT, deadline)) {
      TDIST_THROW(TimeoutError, "timed out writing to ", peer, " (", done, " of ", size,
                  " bytes sent)");
    }
  }
}

void end_sending(int fd, size_t max_drain_bytes) {
  ::shutdown(fd, SHUT_WR);
  char sink[16 * 1024];
  while (max_drain_bytes > 0) {
    const ssize_t n = ::recv(fd, sink, std::min(sizeof(sink), max_drain_bytes), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    max_drain_bytes -= static_cast<size_t>(n);
  }
}

}  // namespace tdist::net
