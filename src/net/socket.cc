// Listening, accepting and connecting (with backoff) TCP sockets.
#include "net/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>

#include "tdist/error.h"

namespace tdist::net {
namespace {

constexpr auto kFirstBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);

Fd make_socket(int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) TDIST_THROW(Error, "socket() failed: ", errno_text(errno));
  return Fd(fd);
}

// One non-blocking connect attempt bounded by `deadline`; 0 or an errno value.
int try_connect(const SocketAddress& address, Deadline deadline, Fd* out) {
  Fd fd = make_socket(address.family());
  if (::connect(fd.get(), address.get(), address.length) != 0) {
    if (errno != EINPROGRESS) return errno;
    if (!wait_fd(fd.get(), POLLOUT, deadline)) return ETIMEDOUT;
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) return errno;
    if (error != 0) return error;
  }
  set_nodelay(fd.get());
  *out = std::move(fd);
  return 0;
}

}  // namespace

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // best effort
}

void prepare_stream(int fd, size_t buffer_bytes) {
  set_nonblocking(fd, true);
  set_nodelay(fd);
  if (buffer_bytes == 0) return;
  const int size = static_cast<int>(std::min<size_t>(buffer_bytes, size_t{1} << 30));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));  // best effort
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

Listener listen_tcp(const std::string& host, uint16_t port, int backlog) {
  std::string name = host == "0.0.0.0" ? std::string() : host;
  std::vector<SocketAddress> addresses = resolve(name, port, /*passive=*/true);
  std::string last_error;
  for (const SocketAddress& address : addresses) {
    Fd fd = make_socket(address.family());
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (address.family() == AF_INET6) {
      int zero = 0;  // "::" also accepts IPv4 clients
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd.get(), address.get(), address.length) != 0) {
      int error = errno;
      if (error == EADDRINUSE) {
        TDIST_THROW(Error, "cannot listen on ", format_host_port(host, port), ": address ",
                    address.to_string(), " is already in use");
      }
      last_error = address.to_string() + ": " + errno_text(error);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_error = address.to_string() + ": listen: " + errno_text(errno);
      continue;
    }
    Listener listener;
    listener.address = SocketAddress::local_of(fd.get());
    listener.fd = std::move(fd);
    return listener;
  }
  TDIST_THROW(Error, "cannot listen on ", format_host_port(host, port), ": ", last_error);
}

Fd accept_tcp(int listen_fd, int* error) {
  *error = 0;
  while (true) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return Fd(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) *error = errno;
    return Fd();
  }
}

Fd connect_tcp(const std::string& host, uint16_t port, Deadline deadline) {
  const std::string target = format_host_port(host, port);
  const auto start = Clock::now();
  std::minstd_rand jitter(static_cast<unsigned>(start.time_since_epoch().count()));
  auto backoff = std::chrono::duration_cast<Clock::duration>(kFirstBackoff);
  std::string last_error = "no attempt made";
  while (true) {
    try {
      for (const SocketAddress& address : resolve(host, port, /*passive=*/false)) {
        Fd fd;
        int error = try_connect(address, deadline, &fd);
        if (error == 0) return fd;
        last_error = address.to_string() + ": " + errno_text(error);
      }
    } catch (const Error& e) {
      last_error = e.what();
    }
    if (deadline.expired()) break;
    // Sleep backoff * [0.5, 1.0), never past the deadline.
    auto sleep = backoff / 2 + backoff * static_cast<int64_t>(jitter() % 1000) / 2000;
    if (!deadline.is_never()) sleep = std::min(sleep, deadline.time() - Clock::now());
    if (sleep > Clock::duration::zero()) std::this_thread::sleep_for(sleep);
    backoff = std::min<Clock::duration>(backoff * 2, kMaxBackoff);
    if (deadline.expired()) break;
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  TDIST_THROW(TimeoutError, "could not connect to ", target, " within ",
              static_cast<int64_t>(secs * 10 + 0.5) / 10.0, "s: ", last_error);
}

}  // namespace tdist::net
