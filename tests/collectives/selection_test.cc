// Algorithm selection: thresholds, the topology rule, explicit choices, and TDIST_ALGO /
// TDIST_CHUNK_BYTES parsing into CollectiveSettings.
#include "collectives/selection.h"

#include <gtest/gtest.h>

#include <string>

#include "collectives/coll_test_util.h"
#include "collectives/settings.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using testing::ScopedEnv;
constexpr transport::LinkClass kTcp = transport::LinkClass::kTcp;

// What TDIST_ALGO=`value` forces for `c`.
Algorithm forced(const char* value, Collective c) {
  return CollectiveSettings::parse(value, 4096).forced(c);
}

// select_algorithm on one host, with TDIST_ALGO=`algo`.
Algorithm flat(Collective c, size_t bytes, int world, const char* algo = "") {
  return select_algorithm(c, bytes, world, 1, kTcp, Algorithm::kAuto, forced(algo, c));
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
        for (int hosts : {1, 2, world}) {
          const Algorithm a = select_algorithm(c, bytes, world, hosts, kTcp);
          bool valid = false;
          for (Algorithm ok : algorithms_for(c)) valid = valid || ok == a;
          EXPECT_TRUE(valid) << collective_name(c) << " chose " << algorithm_name(a);
        }
      }
    }
  }
}

TEST(Selection, GroupsSpanningHostsRunHierarchicalAtEverySize) {
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                       Collective::kAllGather, Collective::kReduceScatter, Collective::kBarrier}) {
    for (size_t bytes : {size_t{0}, size_t{4}, size_t{64} << 10, size_t{1} << 30}) {
      EXPECT_EQ(select_algorithm(c, bytes, 4, 2, kTcp), Algorithm::kHierarchical)
          << collective_name(c);
      EXPECT_EQ(select_algorithm(c, bytes, 6, 3, kTcp), Algorithm::kHierarchical)
          << collective_name(c);
      // One host, or one rank per host: flat.
      EXPECT_NE(select_algorithm(c, bytes, 4, 1, kTcp), Algorithm::kHierarchical)
          << collective_name(c);
      EXPECT_NE(select_algorithm(c, bytes, 4, 4, kTcp), Algorithm::kHierarchical)
          << collective_name(c);
    }
  }
  // The collectives without a hierarchical form stay flat.
  EXPECT_EQ(select_algorithm(Collective::kGather, 100, 4, 2, kTcp), Algorithm::kLinear);
  EXPECT_EQ(select_algorithm(Collective::kScatter, 100, 4, 2, kTcp), Algorithm::kLinear);
  EXPECT_EQ(select_algorithm(Collective::kAllToAll, 100, 4, 2, kTcp), Algorithm::kPairwise);
  // One rank per host: the size thresholds as on one host.
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 64, 8, 8, kTcp),
            Algorithm::kRecursiveDoubling);
}

TEST(Selection, ForcedAlgorithmsWinOverTheTopology) {
  const CollectiveSettings ring = CollectiveSettings::parse("all_reduce=ring", 4096);
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 64, 4, 2, kTcp, Algorithm::kAuto,
                             ring.forced(Collective::kAllReduce)),
            Algorithm::kRing);
  EXPECT_EQ(select_algorithm(Collective::kBroadcast, 64, 4, 2, kTcp, Algorithm::kAuto,
                             ring.forced(Collective::kBroadcast)),
            Algorithm::kHierarchical);
  // Hierarchical forced on one host (it degenerates to one intra-host phase).
  for (const char* value : {"all_reduce=hierarchical", "hierarchical"}) {
    EXPECT_EQ(flat(Collective::kAllReduce, 64, 4, value), Algorithm::kHierarchical) << value;
  }
  EXPECT_EQ(forced("broadcast=hierarchical,reduce=hierarchical,all_gather=hierarchical,"
                   "reduce_scatter=hierarchical,barrier=hierarchical",
                   Collective::kBarrier),
            Algorithm::kHierarchical);
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 64, 4, 2, kTcp, Algorithm::kRecursiveDoubling),
            Algorithm::kRecursiveDoubling);
  EXPECT_THROW(select_algorithm(Collective::kGather, 8, 4, 2, kTcp, Algorithm::kHierarchical),
               InvalidArgument);
}

TEST(Selection, ExplicitChoiceWinsAndIsChecked) {
  const Algorithm ring = forced("all_reduce=ring", Collective::kAllReduce);
  EXPECT_EQ(
      select_algorithm(Collective::kAllReduce, 8, 4, 1, kTcp, Algorithm::kHalvingDoubling, ring),
      Algorithm::kHalvingDoubling);
  EXPECT_THROW(select_algorithm(Collective::kBroadcast, 8, 4, 1, kTcp, Algorithm::kRing),
               InvalidArgument);
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
  EXPECT_NE(message("rign").find("ring, halving_doubling, recursive_doubling, hierarchical"),
            std::string::npos)
      << message("rign");
  EXPECT_NE(message("broadcast=ring").find("binomial, chain, hierarchical"), std::string::npos);
  EXPECT_NE(message("allreduce=ring").find("all_reduce, broadcast"), std::string::npos);
  EXPECT_NE(message("gather=hierarchical").find("valid: linear"), std::string::npos);
}

TEST(Selection, Names) {
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(algorithm_name(Algorithm::kHalvingDoubling), "halving_doubling");
  EXPECT_EQ(algorithm_name(Algorithm::kHierarchical), "hierarchical");
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
