// OpFingerprint (core/op_fingerprint.h): what encode() packs decode() gives back, for every
// root a group can have and for none; words a peer sends are arbitrary, and decoding any of
// them is defined (the root field at its extremes); agreement and the wildcard count; call
// sites (core/call_site.h) in the words and in describe().
#include "core/op_fingerprint.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>

#include "core/call_site.h"

namespace tdist::core {
namespace {

TEST(OpFingerprint, EncodeThenDecodeGivesEveryFieldBack) {
  for (const int root : {OpFingerprint::kNoRoot, 0, 1, 7, 0xFFFFFD}) {
    const OpFingerprint fp =
        OpFingerprint::make(OpKind::kReduce, DType::kBF16, 1000, ReduceOpKind::kMax, root);
    const OpFingerprint back = OpFingerprint::decode(fp.encode());
    EXPECT_EQ(back.kind, OpKind::kReduce);
    EXPECT_EQ(back.dtype, DType::kBF16);
    EXPECT_EQ(back.count, 1000U);
    EXPECT_TRUE(back.has_reduce);
    EXPECT_EQ(back.reduce, ReduceOpKind::kMax);
    EXPECT_EQ(back.root, root);
    EXPECT_EQ(back.site, 0);
  }
  const OpFingerprint none = OpFingerprint::decode(OpFingerprint{}.encode());
  EXPECT_TRUE(none.empty());
  const OpFingerprint no_reduce =
      OpFingerprint::decode(OpFingerprint::make(OpKind::kAllGather, DType::kF32, 3).encode());
  EXPECT_FALSE(no_reduce.has_reduce);
  EXPECT_EQ(no_reduce.root, OpFingerprint::kNoRoot);
}

// The root field holds root + 1 in bits 24-47: 0 is no root, 0xFFFFFF the largest root;
// bits above it are the call site, not the root.
TEST(OpFingerprint, AnyRootFieldFromAPeerDecodes) {
  const uint64_t kind = static_cast<uint64_t>(OpKind::kBroadcast);
  auto decode = [&](uint64_t high) { return OpFingerprint::decode({kind | (high << 24), 8}); };
  EXPECT_EQ(decode(0).root, OpFingerprint::kNoRoot);
  EXPECT_EQ(decode(1).root, 0);
  EXPECT_EQ(decode(0xFFFFFF).root, 0xFFFFFE);
  EXPECT_EQ(decode(0xFFFFFFFFFFU).root, 0xFFFFFE);
  EXPECT_EQ(decode(0xFFFFFFFFFFU).site, 0xFFFF);
  EXPECT_NE(decode(0xFFFFFFFFFFU).describe(3), "");
}

TEST(OpFingerprint, ACallSiteTravelsInTheWordsAndNamesItsLine) {
  auto a = OpFingerprint::make(OpKind::kAllReduce, DType::kF32, 4, ReduceOpKind::kSum);
  auto b = a;
  a.site = call_site_id("/home/me/src/train.cc", 88);
  b.site = call_site_id("/elsewhere/train.cc", 91);
  ASSERT_NE(a.site, 0);
  ASSERT_NE(a.site, b.site);
  // The directory does not count: ranks built elsewhere agree.
  EXPECT_EQ(call_site_id("train.cc", 88), a.site);
  EXPECT_EQ(OpFingerprint::decode(a.encode()).site, a.site);
  EXPECT_FALSE(fingerprints_agree(a.encode(), b.encode()));
  EXPECT_EQ(OpFingerprint::decode(a.encode()).describe(7),
            "all_reduce #7 f32 x4 sum at train.cc:88");
  EXPECT_EQ(OpFingerprint::decode(b.encode()).describe(7),
            "all_reduce #7 f32 x4 sum at train.cc:91");
  auto barrier = OpFingerprint::make(OpKind::kBarrier);
  barrier.site = a.site;
  EXPECT_EQ(barrier.describe(2), "barrier #2 at train.cc:88");
  // A site this process never made is named by its id.
  uint16_t unknown = 1;
  while (call_site_text(unknown).find(".cc") != std::string::npos) ++unknown;
  EXPECT_EQ(call_site_text(unknown).rfind("call site 0x", 0), 0U) << call_site_text(unknown);
  EXPECT_EQ(call_site_text(0), "");
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
