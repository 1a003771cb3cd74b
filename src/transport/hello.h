// HelloRoute: what every kind of channel's setup hello carries — a magic number and a
// protocol version (is this our protocol?), the sending and receiving ranks, and the
// setup's nonce (connect.h's group_nonce: is it this group, this attempt?) — and the one
// check of it. Each kind adds its own fields and encodes the whole hello its own way.
// Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace tdist::transport {

struct HelloRoute {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t reserved = 0;  // zero: no padding goes over the wire
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t nonce = 0;
};

// Empty when `got` has `expected`'s magic, version and nonce, is meant for
// `expected.receiver`, and comes from a rank in [lo, hi]; else why not (`kind`, e.g.
// "TCP transport", names the protocol a foreign magic is not).
std::string check_route(const HelloRoute& got, const HelloRoute& expected, int lo, int hi,
                        const char* kind);

}  // namespace tdist::transport
