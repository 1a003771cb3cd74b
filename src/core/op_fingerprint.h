// OpFingerprint: what one rank says a collective is — the operation, dtype, count, root and
// reduce op — packed into two 64-bit words that travel with every message of the
// collective (transport/core/wire.h), so that a receiver can tell at once when its peer is
// running another operation, or the same one with other arguments.
//
// Two fingerprints agree when either is empty (kind kNone: a message outside any checked
// collective, e.g. point-to-point) or when every field is equal; kAnyCount (the v-variants,
// whose counts legitimately differ between ranks) matches any count. premul_sum's factor
// is left out: ranks may scale by different factors.
// describe() names it as error messages do: "all_reduce #41 f32 x1024 sum",
// "broadcast #41 f32 x1024 root 0", "barrier #7". With TDIST_DEBUG=callsite the caller's
// site joins it (`site`, call_site.h): "all_reduce #7 f32 x4 sum at train.cc:88"; a
// fingerprint without one (0) agrees only with another without one.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::core {

enum class OpKind : uint8_t {
  kNone = 0,
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kAllGatherv,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kAllToAllv,
  kBarrier,  // the last (CommProcessGroup keeps a Work per kind)
};

struct OpFingerprint {
  static constexpr uint64_t kAnyCount = std::numeric_limits<uint64_t>::max();
  static constexpr int kNoRoot = -1;

  OpKind kind = OpKind::kNone;
  DType dtype = DType::kU8;
  bool has_reduce = false;
  ReduceOpKind reduce = ReduceOpKind::kSum;
  int root = kNoRoot;  // < 2^24 - 1 (the wire has 24 bits for it)
  uint64_t count = 0;
  uint16_t site = 0;  // call_site_id() of the caller, 0 when not checked

  // The two wire words; {0, 0} for kNone.
  struct Words {
    uint64_t w0 = 0;
    uint64_t w1 = 0;
  };
  static OpFingerprint make(OpKind kind, DType dtype = DType::kU8, uint64_t count = 0,
                            std::optional<ReduceOpKind> reduce = {}, int root = kNoRoot) {
    OpFingerprint fp;
    fp.kind = kind;
    fp.dtype = dtype;
    fp.count = count;
    fp.has_reduce = reduce.has_value();
    if (reduce) fp.reduce = *reduce;
    fp.root = root;
    return fp;
  }

  Words encode() const;
  static OpFingerprint decode(Words words);

  bool empty() const { return kind == OpKind::kNone; }
  // "all_reduce #41 f32 x1024 sum"; `seq` is the group's operation number.
  std::string describe(uint64_t seq) const;
};

// Whether two encoded fingerprints describe the same collective (see above).
bool fingerprints_agree(OpFingerprint::Words a, OpFingerprint::Words b);

const char* op_kind_name(OpKind kind);

}  // namespace tdist::core
