// The TCP transport's hello codec (hello_codec.h).
#include "transport/tcp/hello_codec.h"

#include <cstring>

#include "tdist/error.h"

namespace tdist::transport::tcp {
namespace {

template <typename T>
void put(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

template <typename T>
T take(const uint8_t* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(T{in[i]} << (8 * i));
  return value;
}

}  // namespace

Hello hello_to(int sender, int receiver, uint64_t group_id, size_t lane, size_t nsocks) {
  Hello h;
  h.route.sender = static_cast<uint32_t>(sender);
  h.route.receiver = static_cast<uint32_t>(receiver);
  h.route.nonce = group_id;
  h.lane = static_cast<uint8_t>(lane);
  h.nsocks = static_cast<uint8_t>(nsocks);
  return h;
}

void encode_hello(const Hello& h, uint8_t* out) {
  std::memset(out, 0, kHelloBytes);
  put(out, h.route.magic);
  put(out + 4, h.route.version);
  out[6] = h.lane;
  out[7] = h.nsocks;
  put(out + 8, h.route.sender);
  put(out + 12, h.route.receiver);
  put(out + 16, h.route.nonce);
}

Hello decode_hello(const uint8_t* in) {
  Hello h;
  h.route.magic = take<uint32_t>(in);
  h.route.version = take<uint16_t>(in + 4);
  h.lane = in[6];
  h.nsocks = in[7];
  h.route.sender = take<uint32_t>(in + 8);
  h.route.receiver = take<uint32_t>(in + 12);
  h.route.nonce = take<uint64_t>(in + 16);
  return h;
}

std::string check_hello(const Hello& h, uint64_t group_id, size_t nsocks, int receiver,
                        int sender_lo, int sender_hi) {
  std::string why = check_route(h.route, hello_to(0, receiver, group_id, 0, nsocks).route,
                                sender_lo, sender_hi, "TCP transport");
  if (!why.empty()) return why;
  if (h.nsocks != nsocks) {
    return detail::str_cat("it uses ", int{h.nsocks}, " sockets per peer, this rank ", nsocks,
                           " (TDIST_SOCKET_NSOCKS_PERPEER must agree on every rank)");
  }
  if (h.lane >= nsocks) return detail::str_cat("socket index ", int{h.lane}, " out of range");
  return {};
}

}  // namespace tdist::transport::tcp
