// The shared-memory transport's hello: the 40 bytes each end of a new unix socket sends
// first (with its ring's memfd attached), their decoding and their check. Both ends are on
// one host, so the hello is a plain struct in host layout. Plain values and pure
// functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/hello.h"

namespace tdist::transport::shm {

constexpr uint32_t kHelloMagic = 0x4d536474;  // "tdSM"
// 2: 32-byte message headers (fingerprints); 3: the slot area after the control page
constexpr uint16_t kProtocolVersion = 3;

struct Hello {
  HelloRoute route{kHelloMagic, kProtocolVersion};
  uint32_t pid = 0;
  uint32_t reserved2 = 0;
  uint64_t capacity = 0;  // data bytes of the ring whose memfd comes with this hello
};
static_assert(sizeof(Hello) == 40);
constexpr size_t kHelloBytes = sizeof(Hello);

// From this process (its pid) to `peer`, announcing a ring of `capacity` data bytes.
Hello hello_to(int rank, int peer, uint64_t nonce, uint64_t capacity);

Hello decode_hello(const uint8_t* in);  // reads kHelloBytes

// Empty when `h` is a valid hello from a rank in [lo, hi] to `receiver`; else why not.
// (The ring that comes with it is checked when it is mapped.)
std::string check_hello(const Hello& h, uint64_t nonce, int receiver, int lo, int hi);

}  // namespace tdist::transport::shm
