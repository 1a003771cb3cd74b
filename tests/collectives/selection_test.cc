// Algorithm selection: thresholds, explicit choices and TDIST_ALGO parsing.
#include "collectives/selection.h"

#include <gtest/gtest.h>

#include <string>

#include "collectives/coll_test_util.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using testing::ScopedEnv;

TEST(Selection, BySize) {
  ScopedEnv env("TDIST_ALGO", nullptr);
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 64, 8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, size_t{64} << 20, 8), Algorithm::kRing);
  EXPECT_EQ(select_algorithm(Collective::kBroadcast, 16, 8), Algorithm::kBinomial);
  EXPECT_EQ(select_algorithm(Collective::kBroadcast, size_t{64} << 20, 8), Algorithm::kChain);
  EXPECT_EQ(select_algorithm(Collective::kAllToAll, 100, 4), Algorithm::kPairwise);
  EXPECT_EQ(select_algorithm(Collective::kBarrier, 0, 4), Algorithm::kDissemination);
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                       Collective::kAllGather, Collective::kGather, Collective::kScatter,
                       Collective::kReduceScatter, Collective::kAllToAll, Collective::kBarrier}) {
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
  ScopedEnv env("TDIST_ALGO", "all_reduce=ring");
  EXPECT_EQ(select_algorithm(Collective::kAllReduce, 8, 4, Algorithm::kHalvingDoubling),
            Algorithm::kHalvingDoubling);
  EXPECT_THROW(select_algorithm(Collective::kBroadcast, 8, 4, Algorithm::kRing), InvalidArgument);
}

TEST(Selection, EnvironmentForcesAlgorithms) {
  {
    ScopedEnv env("TDIST_ALGO", "ring");
    EXPECT_EQ(select_algorithm(Collective::kAllReduce, 8, 4), Algorithm::kRing);
    EXPECT_EQ(select_algorithm(Collective::kBroadcast, 8, 4), Algorithm::kBinomial);
  }
  {
    ScopedEnv env("TDIST_ALGO", "all_reduce=halving_doubling,broadcast=chain,reduce=chain");
    EXPECT_EQ(select_algorithm(Collective::kAllReduce, size_t{1} << 30, 4),
              Algorithm::kHalvingDoubling);
    EXPECT_EQ(select_algorithm(Collective::kBroadcast, 8, 4), Algorithm::kChain);
    EXPECT_EQ(select_algorithm(Collective::kReduce, 8, 4), Algorithm::kChain);
  }
  {
    ScopedEnv env("TDIST_ALGO", "auto");
    EXPECT_EQ(select_algorithm(Collective::kAllReduce, 8, 4), Algorithm::kRecursiveDoubling);
  }
}

TEST(Selection, UnknownNamesListTheValidOnes) {
  auto message = [](const char* value) {
    ScopedEnv env("TDIST_ALGO", value);
    try {
      select_algorithm(Collective::kAllReduce, 8, 4);
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

}  // namespace
}  // namespace tdist::coll
