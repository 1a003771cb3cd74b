// Algorithm selection: the measured table per link class and world, the rule for larger
// worlds, the topology rule, explicit choices, and TDIST_ALGO / TDIST_CHUNK_BYTES parsing
// into CollectiveSettings.
#include "collectives/selection.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "collectives/coll_test_util.h"
#include "collectives/settings.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using testing::ScopedEnv;
using transport::LinkClass;
constexpr LinkClass kTcp = LinkClass::kTcp;
constexpr LinkClass kShm = LinkClass::kShm;
constexpr size_t kAlways = SIZE_MAX;
constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * 1024;

// What TDIST_ALGO=`value` forces for `c`.
Algorithm forced(const char* value, Collective c) {
  return CollectiveSettings::parse(value, 4096).forced(c);
}

// select_algorithm on one host over TCP, with TDIST_ALGO=`algo`.
Algorithm flat(Collective c, size_t bytes, int world, const char* algo = "") {
  return select_algorithm(c, bytes, world, 1, kTcp, Algorithm::kAuto, forced(algo, c));
}

// select_algorithm on one host with links of class `link`.
Algorithm on(LinkClass link, Collective c, size_t bytes, int world) {
  return select_algorithm(c, bytes, world, 1, link);
}

// selection.cc's table, as measured (bytes up to which the latency algorithm runs).
struct Row {
  LinkClass link;
  int world;
  size_t recursive_doubling, halving_doubling, broadcast_binomial, reduce_binomial;
};
constexpr Row kTable[] = {
    {kShm, 2, 128 * KiB, 128 * KiB, kAlways, 256 * KiB},
    {kShm, 3, 512 * KiB, kAlways, 512 * KiB, 256 * KiB},
    {kShm, 4, 32 * KiB, kAlways, 8 * MiB, 256 * KiB},
    {kTcp, 2, 512 * KiB, 512 * KiB, kAlways, 64 * KiB},
    {kTcp, 3, 64 * KiB, 128 * KiB, 8 * MiB, 256 * KiB},
    {kTcp, 4, 32 * KiB, kAlways, 4 * MiB, 512 * KiB},
};

// Checks that `c` runs `small` up to `bound` bytes and `large` just above it.
void expect_bound(const Row& row, Collective c, size_t bound, Algorithm small, Algorithm large) {
  const std::string where = std::string(collective_name(c)) + " over " +
                            transport::link_class_name(row.link) + ", world " +
                            std::to_string(row.world) + ", at ";
  EXPECT_EQ(on(row.link, c, bound == kAlways ? size_t{1} << 40 : bound, row.world), small)
      << where << bound;
  if (bound != kAlways) {
    EXPECT_EQ(on(row.link, c, bound + 1, row.world), large) << where << bound + 1;
  }
}

TEST(Selection, TheMeasuredTable) {
  for (const Row& row : kTable) {
    EXPECT_EQ(on(row.link, Collective::kAllReduce, 8, row.world), Algorithm::kRecursiveDoubling);
    EXPECT_EQ(on(row.link, Collective::kBroadcast, 8, row.world), Algorithm::kBinomial);
    EXPECT_EQ(on(row.link, Collective::kReduce, 8, row.world), Algorithm::kBinomial);
    const bool hd = row.halving_doubling > row.recursive_doubling;
    expect_bound(row, Collective::kAllReduce, row.recursive_doubling, Algorithm::kRecursiveDoubling,
                 hd ? Algorithm::kHalvingDoubling : Algorithm::kRing);
    if (hd) {
      expect_bound(row, Collective::kAllReduce, row.halving_doubling, Algorithm::kHalvingDoubling,
                   Algorithm::kRing);
    }
    expect_bound(row, Collective::kBroadcast, row.broadcast_binomial, Algorithm::kBinomial,
                 Algorithm::kChain);
    expect_bound(row, Collective::kReduce, row.reduce_binomial, Algorithm::kBinomial,
                 Algorithm::kChain);
  }
}

TEST(Selection, TheLinkClassChangesTheChoice) {
  // With 2 ranks shared memory moves to the ring 4x earlier: copies, not round trips, cost.
  EXPECT_EQ(on(kShm, Collective::kAllReduce, 256 * KiB, 2), Algorithm::kRing);
  EXPECT_EQ(on(kTcp, Collective::kAllReduce, 256 * KiB, 2), Algorithm::kRecursiveDoubling);
  // With 3 ranks (no polling on 2 cores) shared memory keeps recursive doubling longer.
  EXPECT_EQ(on(kShm, Collective::kAllReduce, 256 * KiB, 3), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(on(kTcp, Collective::kAllReduce, 256 * KiB, 3), Algorithm::kRing);
  EXPECT_EQ(on(kShm, Collective::kReduce, 128 * KiB, 2), Algorithm::kBinomial);
  EXPECT_EQ(on(kTcp, Collective::kReduce, 128 * KiB, 2), Algorithm::kChain);
  // Unknown (a Comm not built by connect_comm) selects as tcp.
  for (Collective c : kAllCollectives) {
    for (int world = 1; world <= 9; ++world) {
      for (size_t bytes = 0; bytes <= (size_t{1} << 30); bytes = bytes * 2 + 1) {
        EXPECT_EQ(on(LinkClass::kUnknown, c, bytes, world), on(kTcp, c, bytes, world))
            << collective_name(c) << " world " << world << " " << bytes;
      }
    }
  }
}

TEST(Selection, LargerWorldsTakeTheMeasuredWorldOfTheirKind) {
  for (LinkClass link : {kShm, kTcp}) {
    for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce}) {
      for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 2) {
        for (size_t b : {bytes, bytes + 1}) {
          for (int world : {8, 16, 64}) EXPECT_EQ(on(link, c, b, world), on(link, c, b, 4));
          for (int world : {5, 6, 7, 12, 100}) {
            EXPECT_EQ(on(link, c, b, world), on(link, c, b, 3));
          }
        }
      }
    }
  }
  // World 1 runs nothing; it selects as world 2.
  EXPECT_EQ(on(kShm, Collective::kAllReduce, 256 * KiB, 1), Algorithm::kRing);
}

TEST(Selection, LargerMessagesNeverGoBackToASmallerMessagesAlgorithm) {
  // The order in which each collective's algorithms take over as the size grows.
  const auto order = [](Algorithm a) {
    switch (a) {
      case Algorithm::kRecursiveDoubling:
      case Algorithm::kBinomial:
        return 0;
      case Algorithm::kHalvingDoubling:
        return 1;
      default:
        return 2;
    }
  };
  for (LinkClass link : {kShm, kTcp}) {
    for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce}) {
      for (int world = 2; world <= 9; ++world) {
        int last = 0;
        for (size_t bytes = 0; bytes <= (size_t{1} << 32); bytes = bytes * 3 / 2 + 1) {
          const int now = order(on(link, c, bytes, world));
          EXPECT_GE(now, last) << collective_name(c) << " world " << world << " " << bytes;
          last = now;
        }
      }
    }
  }
}

TEST(Selection, EveryChoiceIsValid) {
  EXPECT_EQ(flat(Collective::kAllToAll, 100, 4), Algorithm::kPairwise);
  EXPECT_EQ(flat(Collective::kBarrier, 0, 4), Algorithm::kDissemination);
  EXPECT_EQ(flat(Collective::kAllGather, size_t{64} << 20, 4), Algorithm::kRing);
  for (Collective c : kAllCollectives) {
    for (size_t bytes : {size_t{0}, size_t{1000}, size_t{1} << 30}) {
      for (int world : {1, 2, 3, 8, 64}) {
        for (int hosts : {1, 2, world}) {
          for (LinkClass link : {kShm, kTcp, LinkClass::kUnknown}) {
            const Algorithm a = select_algorithm(c, bytes, world, hosts, link);
            bool valid = false;
            for (Algorithm ok : algorithms_for(c)) valid = valid || ok == a;
            EXPECT_TRUE(valid) << collective_name(c) << " chose " << algorithm_name(a);
          }
        }
      }
    }
  }
}

// Slots (selection.h): all_reduce up to the Comm's slot size and barrier, on one host, up to
// kMaxSlotWorld ranks, only where the Comm has slots; a forced or requested kSlots that
// cannot run gives way to the size's algorithm, and any other forced one wins.
TEST(Selection, SlotsWhereTheCommHasThemAndTheVectorFits) {
  constexpr size_t kSlot = 4096;
  auto pick = [&](Collective c, size_t bytes, int world, int hosts, size_t slot,
                  Algorithm requested = Algorithm::kAuto, Algorithm forced = Algorithm::kAuto) {
    return select_algorithm(c, bytes, world, hosts, kShm, requested, forced, slot);
  };
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 2, 1, kSlot), Algorithm::kSlots);
  EXPECT_EQ(pick(Collective::kAllReduce, kSlot, kMaxSlotWorld, 1, kSlot), Algorithm::kSlots);
  EXPECT_EQ(pick(Collective::kBarrier, 0, 3, 1, kSlot), Algorithm::kSlots);
  EXPECT_EQ(pick(Collective::kAllReduce, kSlot + 1, 2, 1, kSlot), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, kMaxSlotWorld + 1, 1, kSlot),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 2, 1, 0), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(Collective::kBarrier, 0, 2, 1, 0), Algorithm::kDissemination);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 4, 2, kSlot), Algorithm::kHierarchical);
  EXPECT_EQ(pick(Collective::kBroadcast, 8, 2, 1, kSlot), Algorithm::kBinomial);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 2, 1, 0, Algorithm::kSlots),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 2, 1, 0, Algorithm::kAuto, Algorithm::kSlots),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(pick(Collective::kAllReduce, 8, 2, 1, kSlot, Algorithm::kAuto, Algorithm::kRing),
            Algorithm::kRing);
  EXPECT_THROW(pick(Collective::kBroadcast, 8, 2, 1, kSlot, Algorithm::kSlots), InvalidArgument);
}

TEST(Selection, GroupsSpanningHostsRunHierarchicalAtEverySize) {
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                       Collective::kAllGather, Collective::kReduceScatter, Collective::kBarrier}) {
    for (size_t bytes : {size_t{0}, size_t{4}, size_t{64} << 10, size_t{1} << 30}) {
      for (LinkClass link : {kShm, kTcp}) {
        EXPECT_EQ(select_algorithm(c, bytes, 4, 2, link), Algorithm::kHierarchical)
            << collective_name(c);
        EXPECT_EQ(select_algorithm(c, bytes, 6, 3, link), Algorithm::kHierarchical)
            << collective_name(c);
        // One host, or one rank per host: flat.
        EXPECT_NE(select_algorithm(c, bytes, 4, 1, link), Algorithm::kHierarchical)
            << collective_name(c);
        EXPECT_NE(select_algorithm(c, bytes, 4, 4, link), Algorithm::kHierarchical)
            << collective_name(c);
      }
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
  EXPECT_EQ(flat(Collective::kAllReduce, size_t{1} << 30, 3, several), Algorithm::kHalvingDoubling);
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

TEST(CollectiveSettings, FromEnvironmentReadsNowAndACtxReadsNothing) {
  {
    ScopedEnv algo("TDIST_ALGO", "broadcast=chain");
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "1234");
    const CollectiveSettings now = CollectiveSettings::from_environment();
    EXPECT_EQ(now.forced(Collective::kBroadcast), Algorithm::kChain);
    EXPECT_EQ(now.chunk_bytes, 1234u);
    // A Ctx made without settings forces nothing, whatever the environment says.
    const CollectiveSettings plain{};
    EXPECT_EQ(plain.forced(Collective::kBroadcast), Algorithm::kAuto);
    EXPECT_FALSE(plain.chunk_given);
  }
  {
    ScopedEnv algo("TDIST_ALGO", "all_reduce=ring");
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "77");
    EXPECT_EQ(CollectiveSettings::from_environment().chunk_bytes, 77u);
    EXPECT_EQ(CollectiveSettings::from_environment().forced(Collective::kAllReduce),
              Algorithm::kRing);
  }
  {
    ScopedEnv algo("TDIST_ALGO", nullptr);
    ScopedEnv chunk("TDIST_CHUNK_BYTES", nullptr);
    EXPECT_EQ(CollectiveSettings{}.chunk_bytes, CollectiveSettings::from_environment().chunk_bytes);
  }
  {
    ScopedEnv algo("TDIST_ALGO", "all_reduce=chain");
    EXPECT_THROW(CollectiveSettings::from_environment(), InvalidArgument);
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "0");
    ScopedEnv ok("TDIST_ALGO", nullptr);
    EXPECT_THROW(CollectiveSettings::from_environment(), InvalidArgument);
  }
}

// A chunk size given (parse, or TDIST_CHUNK_BYTES set) holds for every group; only without
// one may a group on device memory pick its own (comm_device.h).
TEST(CollectiveSettings, TellsWhetherTheChunkSizeWasGiven) {
  EXPECT_TRUE(CollectiveSettings::parse("", 4096).chunk_given);
  {
    ScopedEnv chunk("TDIST_CHUNK_BYTES", nullptr);
    const CollectiveSettings unset = CollectiveSettings::from_environment();
    EXPECT_FALSE(unset.chunk_given);
    EXPECT_EQ(unset.chunk_bytes, 262144u);
  }
  {
    ScopedEnv chunk("TDIST_CHUNK_BYTES", "262144");  // the default's value, but given
    EXPECT_TRUE(CollectiveSettings::from_environment().chunk_given);
  }
}

}  // namespace
}  // namespace tdist::coll
