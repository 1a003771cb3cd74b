// The core's wire format on every channel (channel.h).
//
// Every message is a 16-byte header {u64 tag, u64 bytes} in host byte order (ranks of one
// group share an architecture), followed by `bytes` of payload. Two tags outside both tag
// ranges of comm.h are control frames:
//   kGoodbyeTag (0 bytes)  the sender is destroying its Comm cleanly; the end of the stream
//                          may follow and is not an error
//   kAbortTag (n bytes)    the sender aborted its Comm; the payload is the reason (text)
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdist::transport::core {

struct WireHeader {
  uint64_t tag = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(WireHeader) == 16);

inline constexpr size_t kHeaderBytes = sizeof(WireHeader);
inline constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
inline constexpr uint64_t kAbortTag = ~uint64_t{0} - 1;
// Longest abort reason sent or accepted; a longer one is a protocol error.
inline constexpr uint64_t kMaxAbortReasonBytes = 4 * 1024;
// Larger than any sane message; a header claiming more means the stream is corrupt.
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 44;

}  // namespace tdist::transport::core
