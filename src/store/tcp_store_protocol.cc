// TCPStore wire format: frame building and bounds-checked payload decoding.
#include "store/tcp_store_protocol.h"

#include <cstring>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::store_wire {
namespace {

void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

const char* command_name(uint8_t code) {
  static constexpr const char* kNames[] = {"UNKNOWN",     "SET",    "GET",        "ADD",
                                           "COMPARE_SET", "CHECK",  "WAIT",       "DELETE",
                                           "NUM_KEYS",    "APPEND", "MULTI_GET",  "MULTI_SET",
                                           "PING",        "CANCEL", "AUTH_HELLO", "AUTH_PROOF"};
  return code < std::size(kNames) ? kNames[code] : "UNKNOWN";
}

Limits Limits::from_settings() {
  Limits l;
  l.max_key_bytes = static_cast<size_t>(setting_int("TDIST_STORE_MAX_KEY_BYTES"));
  l.max_value_bytes = static_cast<size_t>(setting_int("TDIST_STORE_MAX_VALUE_BYTES"));
  return l;
}

uint32_t peek_length(const uint8_t* data) { return static_cast<uint32_t>(get_le(data, 4)); }

FrameHeader decode_header(const uint8_t* data) {
  FrameHeader h;
  h.length = static_cast<uint32_t>(get_le(data, 4));
  h.version = data[4];
  h.code = data[5];
  h.request_id = static_cast<uint32_t>(get_le(data + 6, 4));
  return h;
}

FrameWriter::FrameWriter(std::vector<uint8_t>& out, uint8_t code, uint32_t request_id)
    : out_(out), start_(out.size()) {
  put_le(out_, 0, 4);  // patched by finish()
  out_.push_back(kVersion);
  out_.push_back(code);
  put_le(out_, request_id, 4);
}

FrameWriter& FrameWriter::u8(uint8_t v) {
  out_.push_back(v);
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t v) {
  put_le(out_, v, 4);
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t v) {
  put_le(out_, static_cast<uint64_t>(v), 8);
  return *this;
}

FrameWriter& FrameWriter::bytes(std::span<const uint8_t> v) {
  put_le(out_, v.size(), 4);
  out_.insert(out_.end(), v.begin(), v.end());
  return *this;
}

FrameWriter& FrameWriter::bytes(std::string_view v) {
  return bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
}

FrameWriter& FrameWriter::keys(const std::vector<std::string>& v) {
  u32(static_cast<uint32_t>(v.size()));
  for (const auto& k : v) bytes(k);
  return *this;
}

void FrameWriter::finish() {
  uint64_t length = out_.size() - start_ - kLengthBytes;
  for (int i = 0; i < 4; ++i) out_[start_ + i] = static_cast<uint8_t>(length >> (8 * i));
}

std::span<const uint8_t> PayloadReader::take(size_t n) {
  if (n > data_.size() - pos_) {
    TDIST_THROW(PeerError, "truncated payload: needs ", n, " more bytes, has ",
                data_.size() - pos_);
  }
  auto out = data_.subspan(pos_, n);
  pos_ += n;
  return out;
}

std::span<const uint8_t> PayloadReader::sized(size_t limit, const char* what) {
  uint32_t size = u32();
  if (size > limit) TDIST_THROW(PeerError, what, " of ", size, " bytes exceeds the limit ", limit);
  return take(size);
}

uint8_t PayloadReader::u8() { return take(1)[0]; }
uint32_t PayloadReader::u32() { return static_cast<uint32_t>(get_le(take(4).data(), 4)); }
int64_t PayloadReader::i64() { return static_cast<int64_t>(get_le(take(8).data(), 8)); }

std::string PayloadReader::key() {
  auto s = sized(limits_.max_key_bytes, "key");
  return std::string(s.begin(), s.end());
}

std::vector<uint8_t> PayloadReader::value() {
  auto s = sized(limits_.max_value_bytes, "value");
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string PayloadReader::message() {
  auto s = sized(limits_.max_value_bytes, "message");
  return std::string(s.begin(), s.end());
}

uint32_t PayloadReader::count(size_t min_item) {
  uint32_t n = u32();
  if (min_item > 0 && n > (data_.size() - pos_) / min_item) {
    TDIST_THROW(PeerError, "list of ", n, " items cannot fit in the ", data_.size() - pos_,
                " bytes left");
  }
  return n;
}

std::vector<std::string> PayloadReader::keys() {
  uint32_t n = count(4);
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(key());
  return out;
}

void PayloadReader::expect_end() const {
  if (pos_ != data_.size()) {
    TDIST_THROW(PeerError, "payload has ", data_.size() - pos_, " unexpected trailing bytes");
  }
}

}  // namespace tdist::store_wire
