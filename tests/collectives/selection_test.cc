// Algorithm selection: thresholds, explicit choices, and TDIST_ALGO / TDIST_CHUNK_BYTES
// parsing into CollectiveSettings.
#include "collectives/selection.h"

#include <gtest/gtest.h>

#include <string>

#include "collectives/coll_test_util.h"
#include "collectives/settings.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using testing::ScopedEnv;

// What TDIST_ALGO=`value` forces for `c`.
Algorithm forced(const char* value, Collective c) {
  return CollectiveSettings::parse(value, 4096).forced(c);
}

// select_algorithm on one host, with TDIST_ALGO=`algo`.
Algorithm flat(Collective c, size_t bytes, int world, const char* algo = "") {
  return select_algorithm(c, bytes, world, Algorithm::kAuto, forced(algo, c));
}

TEST(Selection, BySize) {
  EXPECT_EQ(flat(Collective::kAllReduce, 64, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(flat(Collective::kAllReduce, size_t{64} << 20, 8), Algorithm::kRing);
  EXPECT_EQ(flat(Collective::kBroadcast, 16, 8), Algorithm::kBinomial);
  EXPECT_EQ(flat(Collective::kBroadcast, size_t{64} << 20, 8), Algorithm::kChain);
  EXPECT_EQ(flat(Collective::kAllToAll, 100, 4), Algorithm::kPairwise);
  EXPECT_EQ(flat(Collective::kBarrier, 0, 4), Algorithm::kDissemination);
  for (Collective c : kAllCollectives) {
    for (size_t bytes : {size_t{0}, size_t{1000}, size_t{1} << 30}) {
      for (int world : {1, 2, 3, 8, 64}) {
        const Algorithm a = select_algorithm(c, bytes, world);
        bool valid = false;
        for (Algorithm ok : algorithms_for(c)) valid = valid || ok == a;
        EXPECT_TRUE(valid) << collective_name(c) << " chose " << algorithm_name(a);
      }
    }
  }
}

TEST(Selection, ExplicitChoiceWinsAndIsChecked) {
  const Algorithm ring = forced("all_reduce=ring", Collective::kAllReduce);
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 8, 4, Algorithm::kHalvingDoubling, ring),
            Algorithm::kHalvingDoubling);
  EXPECT_THROW(select_algorithm(Collective::kBroadcast, 8, 4, Algorithm::kRing), InvalidArgument);
}

TEST(Selection, EnvironmentForcesAlgorithms) {
  EXPECT_EQ(flat(Collective::kAllReduce, 8, 4, "ring"), Algorithm::kRing);
  EXPECT_EQ(flat(Collective::kBroadcast, 8, 4, "ring"), Algorithm::kBinomial);
  const char* several = "all_reduce=halving_doubling,broadcast=chain,reduce=chain";
  EXPECT_EQ(flat(Collective::kAllReduce, size_t{1} << 30, 4, several), Algorithm::kHalvingDoubling);
  EXPECT_EQ(flat(Collective::kBroadcast, 8, 4, several), Algorithm::kChain);
  EXPECT_EQ(flat(Collective::kReduce, 8, 4, several), Algorithm::kChain);
  EXPECT_EQ(flat(Collective::kAllReduce, 8, 4, "auto"), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(flat(Collective::kAllReduce, 8, 4, "all_reduce=ring,all_reduce=auto"),
            Algorithm::kRing);
}

TEST(Selection, UnknownNamesListTheValidOnes) {
  auto message = [](const char* value) {
    try {
      CollectiveSettings::parse(value, 4096);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("rign").find("ring, halving_doubling, recursive_doubling"), std::string::npos)
      << message("rign");
  EXPECT_NE(message("broadcast=ring").find("binomial, chain"), std::string::npos);
  EXPECT_NE(message("allreduce=ring").find("all_reduce, broadcast"), std::string::npos);
}

TEST(Selection, Names) {
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(algorithm_name(Algorithm::kHalvingDoubling), "halving_doubling");
}

TEST(CollectiveSettings, ParsesChunkAndRejectsNonPositive) {
  EXPECT_EQ(CollectiveSettings::parse("", 64).chunk_bytes, 64u);
  EXPECT_THROW(CollectiveSettings::parse("", 0), InvalidArgument);
  EXPECT_THROW(CollectiveSettings::parse("", -5), InvalidArgument);
  for (Collective c : kAllCollectives) {
    EXPECT_EQ(CollectiveSettings::parse("", 64).forced(c), Algorithm::kAuto);
  }
}

TEST(CollectiveSettings, FromEnvironmentReadsNowTheProcessDefaultOnce) {
  const CollectiveSettings* first = nullptr;
  {
    ScopedEnv algo("TDIST_ALGO", "broadcast=chain");
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "1234");
    const CollectiveSettings now = CollectiveSettings::from_environment();
    EXPECT_EQ(now.forced(Collective::kBroadcast), Algorithm::kChain);
    EXPECT_EQ(now.chunk_bytes, 1234u);
    first = &CollectiveSettings::process_default();
  }
  {
    ScopedEnv algo("TDIST_ALGO", "all_reduce=ring");
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "77");
    EXPECT_EQ(CollectiveSettings::from_environment().chunk_bytes, 77u);
    // Parsed at its first use and kept.
    const CollectiveSettings& again = CollectiveSettings::process_default();
    EXPECT_EQ(&again, first);
    EXPECT_EQ(again.chunk_bytes, first->chunk_bytes);
    EXPECT_EQ(again.forced(Collective::kAllReduce), first->forced(Collective::kAllReduce));
  }
  {
    ScopedEnv algo("TDIST_ALGO", "all_reduce=chain");
    EXPECT_THROW(CollectiveSettings::from_environment(), InvalidArgument);
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "0");
    ScopedEnv ok("TDIST_ALGO", nullptr);
    EXPECT_THROW(CollectiveSettings::from_environment(), InvalidArgument);
  }
}

}  // namespace
}  // namespace tdist::coll
