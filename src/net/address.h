// Socket addresses: parsing "host:port" text, resolving names, printing addresses.
//
// SocketAddress is a value type holding an IPv4 or IPv6 address and port. resolve()
// turns a host name or literal into addresses through getaddrinfo (blocking, may take as
// long as the system resolver does). Thread-safe: free functions on values.
// Failures: InvalidArgument for text that is not "host:port"; Error when a name does not
// resolve (the message carries the resolver's text).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tdist::net {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  // "1.2.3.4:80" or "[::1]:80".
  std::string to_string() const;
  // The address alone, numeric: "1.2.3.4" or "::1"; empty for an empty address.
  std::string ip() const;
  // 127.0.0.0/8 or ::1.
  bool is_loopback() const;
  // Whether this host (network namespace) has the address: a socket can bind it.
  bool is_local() const;

  // The local (getsockname) or remote (getpeername) address of a socket; an empty
  // address (length 0, to_string() "?") when the call fails.
  static SocketAddress local_of(int fd);
  static SocketAddress peer_of(int fd);
};

struct HostPort {
  std::string host;  // without brackets, e.g. "::1"
  uint16_t port = 0;
};

// Parses "host:port", "[v6]:port" or ":port" (empty host). Throws InvalidArgument.
HostPort parse_host_port(std::string_view text);

// "host:port", with brackets around an IPv6 literal: "[::1]:29500".
std::string format_host_port(std::string_view host, uint16_t port);

// The TCP addresses of `host` and `port`. With `passive` (for bind), "" means every
// address; without it "" means loopback. Throws Error naming host and the resolver's text.
std::vector<SocketAddress> resolve(const std::string& host, uint16_t port, bool passive);

}  // namespace tdist::net
