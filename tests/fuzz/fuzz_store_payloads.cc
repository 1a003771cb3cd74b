// fuzz_store_payloads: the TCPStore's wire decoding alone (store/tcp_store_protocol.h),
// many times faster than fuzz_store_frames' round trip through a server. The input is a
// program and a frame: byte 0 says how many program bytes follow, each one a PayloadReader
// call (u8, u32, i64, key, value, message, keys, count, expect_end); the rest is a frame
// whose header is decoded and whose payload the program reads (PeerError is the expected
// failure). What was read is written again with FrameWriter and read back by the same
// program: it must be the bytes that were read, and give the same values.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "store/tcp_store_protocol.h"
#include "tdist/error.h"

namespace {

using namespace tdist::store_wire;

using Item = std::variant<uint64_t, std::string, std::vector<uint8_t>, std::vector<std::string>>;

constexpr Limits kLimits{64, 1024};

// Runs `program` on `payload`; the values read, until the end or the first PeerError.
std::vector<Item> run(std::span<const uint8_t> program, std::span<const uint8_t> payload,
                      bool* failed) {
  PayloadReader r(payload, kLimits);
  std::vector<Item> items;
  *failed = false;
  try {
    for (uint8_t op : program) {
      switch (op % 9) {
        case 0:
          items.emplace_back(uint64_t{r.u8()});
          break;
        case 1:
          items.emplace_back(uint64_t{r.u32()});
          break;
        case 2:
          items.emplace_back(static_cast<uint64_t>(r.i64()));
          break;
        case 3:
          items.emplace_back(r.key());
          break;
        case 4:
          items.emplace_back(r.value());
          break;
        case 5:
          items.emplace_back(r.message());
          break;
        case 6:
          items.emplace_back(r.keys());
          break;
        case 7:
          items.emplace_back(uint64_t{r.count(op / 9 % 16)});
          break;
        case 8:
          r.expect_end();
          break;
      }
    }
  } catch (const tdist::PeerError&) {
    *failed = true;
  }
  return items;
}

void write(FrameWriter& w, std::span<const uint8_t> program, const std::vector<Item>& items) {
  size_t i = 0;
  for (uint8_t op : program) {
    if (op % 9 == 8) continue;
    if (i == items.size()) return;
    const Item& item = items[i++];
    switch (op % 9) {
      case 0:
        w.u8(static_cast<uint8_t>(std::get<uint64_t>(item)));
        break;
      case 1:
      case 7:
        w.u32(static_cast<uint32_t>(std::get<uint64_t>(item)));
        break;
      case 2:
        w.i64(static_cast<int64_t>(std::get<uint64_t>(item)));
        break;
      case 3:
      case 5:
        w.bytes(std::get<std::string>(item));
        break;
      case 4:
        w.bytes(std::span<const uint8_t>(std::get<std::vector<uint8_t>>(item)));
        break;
      case 6:
        w.keys(std::get<std::vector<std::string>>(item));
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t program_size = std::min<size_t>(data[0] % 32, size - 1);
  const std::span<const uint8_t> program(data + 1, program_size);
  std::span<const uint8_t> frame(data + 1 + program_size, size - 1 - program_size);
  if (frame.size() < kHeaderBytes) return 0;
  const FrameHeader h = decode_header(frame.data());
  if (peek_length(frame.data()) != h.length) std::abort();
  (void)command_name(h.code);
  const std::span<const uint8_t> payload = frame.subspan(kHeaderBytes);

  bool failed = false;
  const std::vector<Item> items = run(program, payload, &failed);
  if (failed) return 0;
  // Encode what was read (a count is written as the u32 it was) and decode it again. A
  // count is checked against what follows, and the rewritten frame may be shorter only
  // where expect_end did not demand the end, so a failure there is no mismatch.
  std::vector<uint8_t> out;
  FrameWriter w(out, h.code, h.request_id);
  write(w, program, items);
  w.finish();
  const FrameHeader h2 = decode_header(out.data());
  if (h2.code != h.code || h2.request_id != h.request_id || h2.version != kVersion ||
      h2.length + kLengthBytes != out.size()) {
    std::abort();
  }
  // Every field is encoded one way only: the rewrite is the part of the payload that was read.
  const std::span<const uint8_t> rewritten = std::span<const uint8_t>(out).subspan(kHeaderBytes);
  if (rewritten.size() > payload.size() ||
      !std::equal(rewritten.begin(), rewritten.end(), payload.begin())) {
    std::abort();
  }
  bool failed2 = false;
  const std::vector<Item> again = run(program, rewritten, &failed2);
  if (failed2) {
    for (uint8_t op : program) {
      if (op % 9 == 7) return 0;  // a count's items may have been shorter than min_item
    }
    std::abort();
  }
  if (again != items) std::abort();
  return 0;
}
