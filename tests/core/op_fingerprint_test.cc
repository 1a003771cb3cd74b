// OpFingerprint (core/op_fingerprint.h): what encode() packs decode() gives back, for every
// root a group can have and for none; words a peer sends are arbitrary, and decoding any of
// them is defined (the root field at its extremes); agreement and the wildcard count.
#include "core/op_fingerprint.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

namespace tdist::core {
namespace {

TEST(OpFingerprint, EncodeThenDecodeGivesEveryFieldBack) {
  for (const int root : {OpFingerprint::kNoRoot, 0, 1, 7, INT_MAX - 1, INT_MAX}) {
    const OpFingerprint fp =
        OpFingerprint::make(OpKind::kReduce, DType::kBF16, 1000, ReduceOpKind::kMax, root);
    const OpFingerprint back = OpFingerprint::decode(fp.encode());
    EXPECT_EQ(back.kind, OpKind::kReduce);
    EXPECT_EQ(back.dtype, DType::kBF16);
    EXPECT_EQ(back.count, 1000U);
    EXPECT_TRUE(back.has_reduce);
    EXPECT_EQ(back.reduce, ReduceOpKind::kMax);
    EXPECT_EQ(back.root, root);
  }
  const OpFingerprint none = OpFingerprint::decode(OpFingerprint{}.encode());
  EXPECT_TRUE(none.empty());
  const OpFingerprint no_reduce =
      OpFingerprint::decode(OpFingerprint::make(OpKind::kAllGather, DType::kF32, 3).encode());
  EXPECT_FALSE(no_reduce.has_reduce);
  EXPECT_EQ(no_reduce.root, OpFingerprint::kNoRoot);
}

// The root field holds root + 1 in the high 32 bits: 0 is no root, 0x80000000 (which a
// signed subtraction would overflow on) is INT_MAX, 0xFFFFFFFF is INT_MAX + 1 wrapped.
TEST(OpFingerprint, AnyRootFieldFromAPeerDecodes) {
  const uint64_t kind = static_cast<uint64_t>(OpKind::kBroadcast);
  auto root_of = [&](uint64_t field) {
    return OpFingerprint::decode({kind | (field << 32), 8}).root;
  };
  EXPECT_EQ(root_of(0), OpFingerprint::kNoRoot);
  EXPECT_EQ(root_of(1), 0);
  EXPECT_EQ(root_of(0x80000000U), INT_MAX);
  EXPECT_EQ(root_of(0x80000001U), INT_MIN);
  EXPECT_EQ(root_of(0xFFFFFFFFU), -2);
  EXPECT_NE(OpFingerprint::decode({kind | (uint64_t{0x80000000U} << 32), 8}).describe(3), "");
}

TEST(OpFingerprint, AgreementIgnoresEmptyAndHonoursTheWildcardCount) {
  const auto a = OpFingerprint::make(OpKind::kAllReduce, DType::kF32, 4, ReduceOpKind::kSum);
  auto b = a;
  EXPECT_TRUE(fingerprints_agree(a.encode(), b.encode()));
  b.count = 5;
  EXPECT_FALSE(fingerprints_agree(a.encode(), b.encode()));
  b.count = OpFingerprint::kAnyCount;
  EXPECT_TRUE(fingerprints_agree(a.encode(), b.encode()));
  b = a;
  b.reduce = ReduceOpKind::kMax;
  EXPECT_FALSE(fingerprints_agree(a.encode(), b.encode()));
  EXPECT_TRUE(fingerprints_agree(a.encode(), OpFingerprint{}.encode()));
  EXPECT_TRUE(fingerprints_agree(OpFingerprint{}.encode(), b.encode()));
}

}  // namespace
}  // namespace tdist::core
