// The TCPStore wire protocol: binary, length-prefixed frames, little-endian.
//
//   frame   = u32 length | u8 version | u8 code | u32 request_id | payload
//   length  = bytes after the length field (6 + payload size)
//   bytes   = u32 size | size bytes          (keys, values, messages)
//   list    = u32 count | count items
//
// Requests carry a Command code, replies a Status code and the request id they answer.
// Payloads (request -> reply):
//   SET key value -> -            GET key -> value (once key exists)
//   ADD key i64 -> i64            COMPARE_SET key expected desired -> value
//   CHECK list<key> -> u8         WAIT list<key> -> - (once all exist)
//   DELETE key -> u8 existed      NUM_KEYS -> i64
//   APPEND key value -> -         MULTI_GET list<key> -> list<value> (once all exist)
//   MULTI_SET u32 n, n*(key value) -> -
//   PING -> -                     CANCEL u32 wait_id -> u8 was_parked, list<missing key>
//   AUTH_HELLO bytes nonce -> bytes challenge     AUTH_PROOF bytes proof -> -
// A server with a token (net/auth.h) answers nothing but AUTH_HELLO, then AUTH_PROOF, on a
// new connection; anything else, a wrong proof, or a frame over kAuthFrameBytes before the
// proof is refused with a notice. A server without one answers AUTH_HELLO with an ERROR.
// An ERROR reply carries one bytes field, the message. A CANCEL withdraws a parked GET,
// WAIT or MULTI_GET of the same connection; the parked request then never gets a reply.
//
// Thread-safety: FrameWriter/PayloadReader are plain values. Failures: PayloadReader
// throws PeerError for a payload that is truncated, has trailing bytes, or breaks a limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tdist::store_wire {

inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kLengthBytes = 4;
inline constexpr size_t kHeaderBytes = kLengthBytes + 1 + 1 + 4;  // through request_id
// Room for keys and counts around the largest value in one frame.
inline constexpr size_t kFrameSlackBytes = size_t{1} << 20;

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kCheck = 5,
  kWait = 6,
  kDelete = 7,
  kNumKeys = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kPing = 12,
  kCancel = 13,
  kAuthHello = 14,
  kAuthProof = 15,
};

// The largest frame a connection may send before it has authenticated.
inline constexpr size_t kAuthFrameBytes = 256;

enum class Status : uint8_t { kOk = 0, kError = 1 };

// The request id of a server's notice (a kError frame answering no request: why it is
// about to close the connection). Clients never number a request 0.
inline constexpr uint32_t kNoticeRequestId = 0;

const char* command_name(uint8_t code);  // "SET", ... or "UNKNOWN"

struct Limits {
  size_t max_key_bytes;
  size_t max_value_bytes;
  size_t max_frame_bytes() const { return max_value_bytes + kFrameSlackBytes; }
  // TDIST_STORE_MAX_KEY_BYTES and TDIST_STORE_MAX_VALUE_BYTES (read now).
  static Limits from_settings();
};

struct FrameHeader {
  uint32_t length = 0;  // bytes after the length field
  uint8_t version = 0;
  uint8_t code = 0;
  uint32_t request_id = 0;
  size_t payload_size() const { return length - (kHeaderBytes - kLengthBytes); }
};

// Reads the length field of a frame starting at `data` (at least kLengthBytes).
uint32_t peek_length(const uint8_t* data);
// Decodes a header from `data` (at least kHeaderBytes).
FrameHeader decode_header(const uint8_t* data);

// Builds one frame, appending to `out` (which may already hold other frames).
class FrameWriter {
 public:
  FrameWriter(std::vector<uint8_t>& out, uint8_t code, uint32_t request_id);
  FrameWriter& u8(uint8_t v);
  FrameWriter& u32(uint32_t v);
  FrameWriter& i64(int64_t v);
  FrameWriter& bytes(std::span<const uint8_t> v);
  FrameWriter& bytes(std::string_view v);
  FrameWriter& keys(const std::vector<std::string>& v);
  // Patches the length field; the frame is complete afterwards.
  void finish();

 private:
  std::vector<uint8_t>& out_;
  size_t start_;
};

// Decodes a payload; every get checks bounds against the payload and the limits.
class PayloadReader {
 public:
  PayloadReader(std::span<const uint8_t> payload, const Limits& limits)
      : data_(payload), limits_(limits) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string key();
  std::vector<uint8_t> value();
  std::string message();  // an error text (bounded by the value limit)
  std::vector<std::string> keys();
  // A list count, checked against what the remaining bytes can hold (`min_item` each).
  uint32_t count(size_t min_item);
  // Throws unless every byte was consumed.
  void expect_end() const;

 private:
  std::span<const uint8_t> take(size_t n);
  std::span<const uint8_t> sized(size_t limit, const char* what);

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  Limits limits_;
};

}  // namespace tdist::store_wire
