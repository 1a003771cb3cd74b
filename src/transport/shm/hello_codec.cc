// The shared-memory transport's hello codec (hello_codec.h).
#include "transport/shm/hello_codec.h"

#include <unistd.h>

#include <cstring>

namespace tdist::transport::shm {

Hello hello_to(int rank, int peer, uint64_t nonce, uint64_t capacity) {
  Hello h;
  h.route.sender = static_cast<uint32_t>(rank);
  h.route.receiver = static_cast<uint32_t>(peer);
  h.route.nonce = nonce;
  h.pid = static_cast<uint32_t>(::getpid());
  h.capacity = capacity;
  return h;
}

Hello decode_hello(const uint8_t* in) {
  Hello h;
  std::memcpy(&h, in, sizeof(h));
  return h;
}

std::string check_hello(const Hello& h, uint64_t nonce, int receiver, int lo, int hi) {
  HelloRoute expected{kHelloMagic, kProtocolVersion};
  expected.receiver = static_cast<uint32_t>(receiver);
  expected.nonce = nonce;
  return check_route(h.route, expected, lo, hi, "shared-memory transport");
}

}  // namespace tdist::transport::shm
