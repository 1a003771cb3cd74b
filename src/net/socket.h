// TCP sockets: listening, connecting with retry and backoff, socket options, and
// reading/writing whole buffers against a deadline.
//
// Every socket made here is non-blocking and close-on-exec; read_full/write_full wait
// with poll, so one deadline bounds the whole transfer. Sends use MSG_NOSIGNAL (a closed
// peer never raises SIGPIPE). Thread-safety: free functions; callers own their sockets.
// Failures: Error for a local problem (a port in use, no such address), TimeoutError
// when a deadline passes (naming the peer and the time waited), PeerError when the peer
// closes or the connection breaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/address.h"
#include "net/fd.h"
#include "tdist/deadline.h"

namespace tdist::net {

// Asks for a deep accept queue; the kernel clamps it to net.core.somaxconn.
inline constexpr int kListenBacklog = 65535;

struct Listener {
  Fd fd;                  // non-blocking listening socket
  SocketAddress address;  // the bound address, with the real port
  uint16_t port() const { return address.port(); }
};

// Binds host:port (port 0 picks a free port) with SO_REUSEADDR and listens. host "" or
// "0.0.0.0" = every IPv4 address, "::" = every address (dual stack). Throws Error naming
// "host:port is already in use" when the port is taken.
Listener listen_tcp(const std::string& host, uint16_t port, int backlog = kListenBacklog);

// Accepts one connection from a non-blocking listener: a non-blocking, close-on-exec
// socket with TCP_NODELAY, or an empty Fd when none is pending (EAGAIN). Other errors
// (EMFILE, ...) come back through `error` as an errno value, with an empty Fd.
Fd accept_tcp(int listen_fd, int* error);

// Connects to host:port, retrying refused or unreachable attempts with exponential
// backoff (10 ms doubling to 1 s, with jitter) until `deadline`, then throws TimeoutError
// "could not connect to host:port within Ns: <last error>". Name resolution is retried
// too. The socket returned is non-blocking with TCP_NODELAY.
Fd connect_tcp(const std::string& host, uint16_t port, Deadline deadline);

void set_nodelay(int fd);

// A socket for a transport channel: non-blocking, TCP_NODELAY, and where `buffer_bytes` > 0
// send and receive buffers of that size (at most 1 GiB; best effort: the kernel may cap it).
void prepare_stream(int fd, size_t buffer_bytes);

// Waits until fd is ready for `events` (POLLIN/POLLOUT); false when the deadline passed.
bool wait_fd(int fd, short events, Deadline deadline);

// Ends this side's sending (shutdown SHUT_WR) and discards up to `max_drain_bytes` of what
// the peer sent that is already here, without blocking: unread input would turn a later
// close into a reset that can overtake what was sent last.
void end_sending(int fd, size_t max_drain_bytes = SIZE_MAX);

// Reads exactly `size` bytes. Throws PeerError (peer closed or I/O error, naming `peer`)
// or TimeoutError (deadline passed; some bytes may have been consumed).
void read_full(int fd, void* data, size_t size, Deadline deadline, std::string_view peer);

// Writes all `size` bytes; throws like read_full.
void write_full(int fd, const void* data, size_t size, Deadline deadline, std::string_view peer);

}  // namespace tdist::net
