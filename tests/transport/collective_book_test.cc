// CollectiveBooks (core/collective_book.h): each context's collectives are checked in a book
// of their own, and sequence numbers compare modulo 2^31 across the wrap of a tag's bits.
#include "transport/core/collective_book.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tdist/error.h"
#include "transport/comm.h"

namespace tdist::transport::core {
namespace {

using tdist::core::OpFingerprint;
using tdist::core::OpKind;

const OpFingerprint kAllReduce = OpFingerprint::make(OpKind::kAllReduce, DType::kF32, 10);
const OpFingerprint kBroadcast = OpFingerprint::make(OpKind::kBroadcast, DType::kI32, 7, {}, 1);

bool same(CollectiveBook::Check a, const OpFingerprint& fp) {
  const CollectiveBook::Check b = fp.encode();
  return a.w0 == b.w0 && a.w1 == b.w1;
}

TEST(CollectiveBooks, EachContextChecksItsOwnCollectives) {
  CollectiveBooks books;
  books.begin(0, 5, kAllReduce);
  books.begin(3, 5, kBroadcast);  // the same number in another context
  const uint64_t tag = collective_tag(5, 2);
  EXPECT_TRUE(same(books.check_for(tag), kAllReduce));
  EXPECT_TRUE(same(books.check_for(in_context(tag, 3)), kBroadcast));
  EXPECT_EQ(books.check_for(in_context(tag, 4)).w0, 0u) << "a context with no collective";
  EXPECT_FALSE(books.view(in_context(tag, 3)).finished);
  EXPECT_TRUE(same(books.view(in_context(tag, 3)).running, kBroadcast));
  // #4 is finished in context 3 only once context 3 runs #5; context 4 knows nothing.
  EXPECT_TRUE(books.view(in_context(collective_tag(4, 0), 3)).finished);
  EXPECT_FALSE(books.view(in_context(collective_tag(4, 0), 4)).finished);
  EXPECT_NE(books.describe(in_context(tag, 3)).find("broadcast #5"), std::string::npos)
      << books.describe(in_context(tag, 3));
  EXPECT_THROW(books.begin(kMaxContext + 1, 0, kAllReduce), InvalidArgument);
}

TEST(CollectiveBooks, SequenceNumbersCompareAcrossTheWrapOfTheTagsBits) {
  CollectiveBooks books;
  const uint64_t wrap = uint64_t{1} << kTagSeqBits;
  books.begin(0, wrap + 1, kAllReduce);  // tags hold 1
  EXPECT_TRUE(books.view(collective_tag(wrap, 0)).finished);
  EXPECT_TRUE(books.view(collective_tag(wrap - 1, 0)).finished) << "before the wrap";
  EXPECT_FALSE(books.view(collective_tag(wrap + 1, 0)).finished);
  EXPECT_TRUE(same(books.view(collective_tag(wrap + 1, 0)).running, kAllReduce));
  EXPECT_FALSE(books.view(collective_tag(wrap + 2, 0)).finished) << "a later collective";
  EXPECT_EQ(books.view(collective_tag(wrap + 2, 0)).running.w0, 0u);
  // Point-to-point tags are never judged.
  EXPECT_FALSE(books.view(p2p_tag(1)).finished);
}

}  // namespace
}  // namespace tdist::transport::core
