// Interface selection for the TCP transport and tdistrun: TDIST_SOCKET_IFNAME matching,
// getifaddrs, and the route towards the store's host.
#include "net/interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <set>
#include <sstream>

#include "net/address.h"
#include "net/fd.h"
#include "tdist/error.h"

namespace tdist::net {
namespace {

std::string ip_text(const sockaddr* address, const char* ifname) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return text;
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
  ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
  std::string ip = text;
  if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr) && ifname != nullptr) ip += std::string("%") + ifname;
  return ip;
}

// The first IPv4 address among `candidates`, else the first IPv6 one; empty when none.
std::string pick(const std::vector<InterfaceAddress>& candidates) {
  for (const InterfaceAddress& a : candidates) {
    if (!a.ipv6) return a.ip;
  }
  return candidates.empty() ? std::string() : candidates.front().ip;
}

std::string available_interfaces(const std::vector<InterfaceAddress>& all) {
  std::set<std::string> names;
  std::ostringstream out;
  for (const InterfaceAddress& a : all) {
    if (!names.insert(a.name).second) continue;
    out << (names.size() == 1 ? "" : ", ") << a.name;
  }
  return names.empty() ? std::string("none") : out.str();
}

// The local address of the route to `host` (a UDP socket connect()ed there; no packet
// is sent).
std::string route_source_ip(const std::string& host, uint16_t port) {
  std::string last_error;
  for (const SocketAddress& target : resolve(host, port, /*passive=*/false)) {
    Fd fd(::socket(target.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      last_error = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), target.get(), target.length) != 0) {
      last_error = target.to_string() + ": " + errno_text(errno);
      continue;
    }
    SocketAddress local = SocketAddress::local_of(fd.get());
    if (local.length == 0) continue;
    return ip_text(local.get(), nullptr);
  }
  TDIST_THROW(Error, "TCP transport: no route to the store's host ", host, ": ", last_error,
              " (set TDIST_SOCKET_IFNAME to choose an interface)");
}

}  // namespace

std::vector<InterfaceAddress> list_interfaces() {
  ifaddrs* head = nullptr;
  if (::getifaddrs(&head) != 0) {
    TDIST_THROW(Error, "getifaddrs failed: ", errno_text(errno));
  }
  std::vector<InterfaceAddress> result;
  for (ifaddrs* it = head; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0) continue;
    int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = it->ifa_name;
    a.ip = ip_text(it->ifa_addr, it->ifa_name);
    a.ipv6 = family == AF_INET6;
    a.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    result.push_back(std::move(a));
  }
  ::freeifaddrs(head);
  return result;
}

bool interface_matches(std::string_view spec, std::string_view name) {
  if (spec.empty()) return true;
  bool exclude = false;
  bool exact = false;
  if (spec.front() == '^') {
    exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    exact = true;
    spec.remove_prefix(1);
  }
  bool listed = false;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    if (exact ? name == item : name.substr(0, item.size()) == item) {
      listed = true;
      break;
    }
  }
  return listed != exclude;
}

std::string choose_local_ip(const StoreRoute& store, const std::string& ifname_spec) {
  if (!ifname_spec.empty()) {
    std::vector<InterfaceAddress> all = list_interfaces();
    std::vector<InterfaceAddress> matching;
    for (const InterfaceAddress& a : all) {
      if (interface_matches(ifname_spec, a.name)) matching.push_back(a);
    }
    std::string ip = pick(matching);
    if (ip.empty()) {
      TDIST_THROW(Error, "TDIST_SOCKET_IFNAME='", ifname_spec,
                  "' matches no interface that is up and has an IP address; interfaces: ",
                  available_interfaces(all));
    }
    return ip;
  }
  if (!store.host.empty()) return route_source_ip(store.host, store.port);
  if (store.in_process) return "127.0.0.1";
  std::vector<InterfaceAddress> all = list_interfaces();
  std::vector<InterfaceAddress> external;
  for (const InterfaceAddress& a : all) {
    if (!a.loopback && interface_matches("^docker", a.name)) external.push_back(a);
  }
  std::string ip = pick(external);
  return ip.empty() ? std::string("127.0.0.1") : ip;
}

}  // namespace tdist::net
