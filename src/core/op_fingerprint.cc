// OpFingerprint (op_fingerprint.h): the packing and the names.
#include "core/op_fingerprint.h"

#include <sstream>

#include "core/call_site.h"

namespace tdist::core {
namespace {

// w0: kind (bits 0-7), dtype (8-15), reduce op + 1 or 0 (16-23), root + 1 (24-47), call
// site (48-63). The root field is worked in uint32_t both ways: a peer's words are arbitrary,
// and no int arithmetic can overflow on them.
constexpr uint64_t kKindMask = 0xFF;
constexpr uint32_t kRootMask = 0xFFFFFF;

}  // namespace

OpFingerprint::Words OpFingerprint::encode() const {
  if (kind == OpKind::kNone) return {};
  const uint64_t w0 = static_cast<uint64_t>(kind) | (uint64_t{static_cast<uint8_t>(dtype)} << 8) |
                      (has_reduce ? uint64_t{static_cast<uint8_t>(reduce)} + 1 : 0) << 16 |
                      (uint64_t{(static_cast<uint32_t>(root) + 1U) & kRootMask} << 24) |
                      (uint64_t{site} << 48);
  return {w0, count};
}

OpFingerprint OpFingerprint::decode(Words words) {
  OpFingerprint fp;
  fp.kind = static_cast<OpKind>(words.w0 & kKindMask);
  if (fp.kind == OpKind::kNone) return {};
  fp.dtype = static_cast<DType>((words.w0 >> 8) & 0xFF);
  const auto reduce = static_cast<uint8_t>((words.w0 >> 16) & 0xFF);
  fp.has_reduce = reduce != 0;
  if (fp.has_reduce) fp.reduce = static_cast<ReduceOpKind>(reduce - 1);
  const uint32_t root = static_cast<uint32_t>(words.w0 >> 24) & kRootMask;
  fp.root = root == 0 ? kNoRoot : static_cast<int>(root - 1U);
  fp.site = static_cast<uint16_t>(words.w0 >> 48);
  fp.count = words.w1;
  return fp;
}

bool fingerprints_agree(OpFingerprint::Words a, OpFingerprint::Words b) {
  if ((a.w0 & kKindMask) == 0 || (b.w0 & kKindMask) == 0) return true;
  return a.w0 == b.w0 &&
         (a.w1 == b.w1 || a.w1 == OpFingerprint::kAnyCount || b.w1 == OpFingerprint::kAnyCount);
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kNone:
      return "(no collective)";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kAllGatherv:
      return "all_gatherv";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kAllToAllv:
      return "all_to_allv";
    case OpKind::kBarrier:
      return "barrier";
  }
  return "(unknown operation)";
}

std::string OpFingerprint::describe(uint64_t seq) const {
  std::ostringstream out;
  out << op_kind_name(kind) << " #" << seq;
  const std::string at = site != 0 ? " at " + call_site_text(site) : "";
  if (kind == OpKind::kNone || kind == OpKind::kBarrier) return out.str() + at;
  const std::string_view dtype_text = dtype_name(dtype);
  if (dtype_text.empty()) {
    out << " dtype " << static_cast<int>(dtype);
  } else {
    out << ' ' << dtype_text;
  }
  if (count != kAnyCount) out << " x" << count;
  if (has_reduce) out << ' ' << reduce_op_name(reduce);
  if (root != kNoRoot) out << " root " << root;
  return out.str() + at;
}

}  // namespace tdist::core
