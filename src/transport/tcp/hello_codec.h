// The TCP transport's hello: the 24 bytes each end of a new socket sends first (which
// group, which ranks, which of the peer's sockets), their encoding and their check.
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/hello.h"

namespace tdist::transport::tcp {

constexpr uint32_t kHelloMagic = 0x74644354;  // "tdCT"
// 2: several sockets per peer; 3: 32-byte headers; 4: TLS bulk bytes in sealed frames.
constexpr uint16_t kProtocolVersion = 4;
constexpr size_t kHelloBytes = 24;

// The lane of a hello reply that refuses a lazy dial because the two ranks dialled each
// other at once and the higher one's dial wins (lazy_mesh.h): the dialler then waits for it.
constexpr uint8_t kCrossedLane = 255;
// ... because the dialled rank is destroying its Comm (it left the group): the dialler
// takes the peer as gone (lazy_mesh.h). Never a lane: a peer has at most 254 sockets.
constexpr uint8_t kLeftLane = 254;

struct Hello {
  HelloRoute route{kHelloMagic, kProtocolVersion};
  uint8_t lane = 0;
  uint8_t nsocks = 1;
};

Hello hello_to(int sender, int receiver, uint64_t group_id, size_t lane, size_t nsocks);

// Little-endian: magic(4) version(2) lane(1) nsocks(1) sender(4) receiver(4) group_id(8).
void encode_hello(const Hello& h, uint8_t* out);
Hello decode_hello(const uint8_t* in);  // reads kHelloBytes

// Empty when `h` is a valid hello from `sender_lo..sender_hi` to `receiver`; else why not.
std::string check_hello(const Hello& h, uint64_t group_id, size_t nsocks, int receiver,
                        int sender_lo, int sender_hi);

}  // namespace tdist::transport::tcp
