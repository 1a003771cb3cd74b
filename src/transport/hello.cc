// check_route (hello.h).
#include "transport/hello.h"

#include "tdist/error.h"

namespace tdist::transport {

std::string check_route(const HelloRoute& got, const HelloRoute& expected, int lo, int hi,
                        const char* kind) {
  if (got.magic != expected.magic)
    return detail::str_cat("not a tdist ", kind, " connection (bad magic)");
  if (got.version != expected.version) {
    return detail::str_cat("protocol version ", got.version, ", expected ", expected.version);
  }
  if (got.nonce != expected.nonce) {
    return detail::str_cat("group id ", got.nonce, " is not this group's ", expected.nonce,
                           " (a stale connection from another group or attempt)");
  }
  if (got.receiver != expected.receiver) {
    return detail::str_cat("meant for rank ", got.receiver, ", this is rank ", expected.receiver);
  }
  if (got.sender < static_cast<uint32_t>(lo) || got.sender > static_cast<uint32_t>(hi)) {
    return detail::str_cat("sender rank ", got.sender, " is not in [", lo, ", ", hi, "]");
  }
  return {};
}

}  // namespace tdist::transport
