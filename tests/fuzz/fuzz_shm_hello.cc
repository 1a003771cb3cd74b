// fuzz_shm_hello: the shared-memory transport's hello (transport/shm/hello_codec.h) as the
// 40 bytes a connecting peer sends (the memfd that comes with it is checked when mapped,
// in setup.cc). What follows the hello, when there is enough, is what this rank expects
// (nonce, its rank, the senders' range), else fixed values that the seed corpus's valid
// hellos match. Checks that an accepted hello is what was expected.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "transport/shm/hello_codec.h"

namespace {

using namespace tdist::transport::shm;
using tdist::fuzz::take;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHelloBytes) return 0;
  const Hello h = decode_hello(data);
  data += kHelloBytes;
  size -= kHelloBytes;

  const auto nonce = take<uint64_t>(data, size, 0x0123456789abcdefULL);
  const int receiver = take<uint8_t>(data, size, 0);
  const int lo = take<uint8_t>(data, size, 1);
  const int hi = lo + take<uint8_t>(data, size, 2);

  const std::string why = check_hello(h, nonce, receiver, lo, hi);
  if (why.empty()) {
    const bool expected = h.route.magic == kHelloMagic && h.route.version == kProtocolVersion &&
                          h.route.nonce == nonce && h.route.receiver == uint32_t(receiver) &&
                          h.route.sender >= uint32_t(lo) && h.route.sender <= uint32_t(hi);
    if (!expected) std::abort();
  }
  // What this side would answer is always accepted by the other.
  if (!check_hello(hello_to(receiver, lo, nonce, h.capacity), nonce, lo, receiver, receiver)
           .empty()) {
    std::abort();
  }
  return 0;
}
