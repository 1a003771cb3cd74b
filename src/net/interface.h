// Choosing the local address the TCP transport listens on (and tdistrun advertises).
//
// With TDIST_SOCKET_IFNAME set (NCCL's syntax: "eth0,eth1" = name prefixes, "^lo,docker"
// = everything but these prefixes, "=eth0" = exact names, "^=eth0" = all but exact
// names), the first matching interface that is up and has an IPv4 address (else IPv6) is
// used. Otherwise the address is the local end of the route to the store's host when the
// store is a TCPStore (seen through PrefixStores), loopback for an in-process HashStore,
// and else the first up, non-loopback, non-docker interface (loopback when there is none).
// Thread-safe (free functions). Failures: Error naming the setting, its value and the
// interfaces that exist when nothing matches; Error when the store's host does not resolve.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tdist::net {

// One interface address, as getifaddrs reports it.
struct InterfaceAddress {
  std::string name;  // "eth0"
  std::string ip;    // "10.0.0.2" or "fe80::1%eth0"
  bool ipv6 = false;
  bool loopback = false;
};

// Every up interface with an IPv4 or IPv6 address, in getifaddrs order.
std::vector<InterfaceAddress> list_interfaces();

// True when `name` matches the TDIST_SOCKET_IFNAME-style `spec` (empty spec matches all).
bool interface_matches(std::string_view spec, std::string_view name);

// Where a job's store is, as the automatic choice needs it: the host and port of its
// server (a TCPStore's), or `in_process` (a HashStore), or neither (unknown).
struct StoreRoute {
  std::string host;
  uint16_t port = 0;
  bool in_process = false;
};

// The IP to listen on for a group whose store is at `store`, following `ifname_spec`
// (empty = choose automatically, as described above).
std::string choose_local_ip(const StoreRoute& store, const std::string& ifname_spec);

}  // namespace tdist::net
