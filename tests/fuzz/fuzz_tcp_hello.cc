// fuzz_tcp_hello: the TCP transport's hello (transport/tcp/hello_codec.h) as the bytes a
// connecting peer sends. The first 24 bytes are the hello; what follows, when there is
// enough, is what this rank expects (group id, sockets per peer, its rank, the senders'
// range), else fixed values that the seed corpus's valid hellos match. Checks that the
// encoding round-trips and that an accepted hello is what was expected.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "transport/tcp/hello_codec.h"

namespace {

using namespace tdist::transport::tcp;
using tdist::fuzz::take;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHelloBytes) return 0;
  const Hello h = decode_hello(data);
  uint8_t again[kHelloBytes];
  encode_hello(h, again);
  if (std::memcmp(again, data, kHelloBytes) != 0) std::abort();  // every byte is a field
  data += kHelloBytes;
  size -= kHelloBytes;

  const auto group_id = take<uint64_t>(data, size, 0x0123456789abcdefULL);
  const size_t nsocks = 1 + take<uint8_t>(data, size, 1) % 8;
  const int receiver = take<uint8_t>(data, size, 0);
  const int lo = take<uint8_t>(data, size, 1);
  const int hi = lo + take<uint8_t>(data, size, 2);

  const std::string why = check_hello(h, group_id, nsocks, receiver, lo, hi);
  if (why.empty()) {
    const bool expected = h.route.magic == kHelloMagic && h.route.version == kProtocolVersion &&
                          h.route.nonce == group_id && h.route.receiver == uint32_t(receiver) &&
                          h.route.sender >= uint32_t(lo) && h.route.sender <= uint32_t(hi) &&
                          h.nsocks == nsocks && h.lane < nsocks;
    if (!expected) std::abort();
  }
  // What this side would answer is always accepted by the other.
  const Hello reply = hello_to(receiver, lo, group_id, nsocks - 1, nsocks);
  uint8_t wire[kHelloBytes];
  encode_hello(reply, wire);
  if (!check_hello(decode_hello(wire), group_id, nsocks, lo, receiver, receiver).empty()) {
    std::abort();
  }
  return 0;
}
