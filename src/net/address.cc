// Socket address parsing, resolution and printing.
#include "net/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "tdist/error.h"

namespace tdist::net {

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

std::string SocketAddress::ip() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text,
                sizeof(text));
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text,
                sizeof(text));
  }
  return text;
}

std::string SocketAddress::to_string() const {
  if (family() != AF_INET && family() != AF_INET6) return "?";
  return format_host_port(ip(), port());
}

bool SocketAddress::is_loopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  return family() == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

bool SocketAddress::is_local() const {
  if (family() != AF_INET && family() != AF_INET6) return false;
  const int fd = ::socket(family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  SocketAddress probe = *this;  // port 0: nothing is taken
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(probe.get())->sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6*>(probe.get())->sin6_port = 0;
  }
  const bool bound = ::bind(fd, probe.get(), probe.length) == 0;
  ::close(fd);
  return bound;
}

SocketAddress SocketAddress::local_of(int fd) {
  SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getsockname(fd, a.get(), &a.length) != 0) a = SocketAddress();
  return a;
}

SocketAddress SocketAddress::peer_of(int fd) {
  SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getpeername(fd, a.get(), &a.length) != 0) a = SocketAddress();
  return a;
}

HostPort parse_host_port(std::string_view text) {
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      TDIST_THROW(InvalidArgument, "address '", text, "' is not \"[ipv6]:port\"");
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      TDIST_THROW(InvalidArgument, "address '", text,
                  "' is not \"host:port\" (write IPv6 addresses as \"[addr]:port\")");
    }
    out.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      value > 65535) {
    TDIST_THROW(InvalidArgument, "address '", text, "' has no valid port (0-65535)");
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

std::string format_host_port(std::string_view host, uint16_t port) {
  std::string out;
  if (host.find(':') != std::string_view::npos) {
    out.append("[").append(host).append("]");
  } else {
    out.append(host);
  }
  return out.append(":").append(std::to_string(port));
}

std::vector<SocketAddress> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const char* node = host.empty() ? nullptr : host.c_str();
  if (passive && host.empty()) hints.ai_family = AF_INET;  // "" = every IPv4 address
  std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &list);
  if (rc != 0) {
    TDIST_THROW(Error, "cannot resolve host '", host, "': ", ::gai_strerror(rc));
  }
  std::vector<SocketAddress> out;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = static_cast<socklen_t>(ai->ai_addrlen);
    out.push_back(a);
  }
  ::freeaddrinfo(list);
  if (out.empty()) TDIST_THROW(Error, "host '", host, "' has no TCP address");
  return out;
}

}  // namespace tdist::net
