// Sub-groups of the "tcp" backend, ranks as threads: new_group and split membership and
// rank translation, nested sub-groups, and collectives on a sub-group running
// concurrently with collectives on its parent (two threads issuing on each rank). Splits
// run on their parent's connections (transport/context_comm.h): no descriptor opened, their
// messages apart from the parent's, their checks their own, their fate the parent's.
#include <dirent.h>
#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

constexpr int kWorld = 6;

// all_reduce(sum) of f64 values v(global rank, round) on `pg`; checks the result.
void sum_round(ProcessGroup& pg, int round, const char* label) {
  const size_t count = 257;
  Buffer data(DType::kF64, count);
  const int me = pg.global_rank(pg.rank());
  for (size_t i = 0; i < count; ++i) put_float(DType::kF64, data.data(), i, me * 1000 + round + i);
  pg.all_reduce(data.data(), count, DType::kF64)->wait();
  double members = 0;
  for (int g : pg.global_ranks()) members += g * 1000;
  for (size_t i = 0; i < count; ++i) {
    const double want = members + pg.size() * static_cast<double>(round + i);
    const double got = get_float(DType::kF64, data.data(), i);
    if (got != want) {
      ADD_FAILURE() << label << " (global rank " << me << ") round " << round << " element " << i
                    << ": got " << got << ", expected " << want;
      return;
    }
  }
  EXPECT_TRUE(data.guards_intact()) << label;
}

TEST(SubGroupTest, NewGroupOfEvenRanksTranslatesRanksAndSkipsNonMembers) {
  ThreadWorld world(kWorld);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> evens = pg.new_group({4, 0, 2});  // any order; sorted
    if (rank % 2 != 0) {
      EXPECT_EQ(evens, nullptr) << "rank " << rank << " is not a member";
      return;
    }
    ASSERT_NE(evens, nullptr) << "rank " << rank;
    EXPECT_EQ(evens->size(), 3);
    EXPECT_EQ(evens->rank(), rank / 2);
    EXPECT_EQ(evens->backend_name(), test_backend());
    EXPECT_EQ(evens->global_ranks(), (std::vector<int>{0, 2, 4}));
    EXPECT_EQ(evens->global_rank(1), 2);
    EXPECT_EQ(evens->group_rank(4), 2);
    EXPECT_EQ(evens->group_rank(3), -1);
    EXPECT_THROW(evens->global_rank(3), InvalidArgument);
    EXPECT_THROW(evens->global_rank(-1), InvalidArgument);
    for (int round = 0; round < 3; ++round) sum_round(*evens, round, "evens");

    // A sub-group of a sub-group still translates to the world's ranks.
    std::shared_ptr<ProcessGroup> nested = evens->new_group({1, 2});
    if (rank == 0) {
      EXPECT_EQ(nested, nullptr);
    } else {
      ASSERT_NE(nested, nullptr);
      EXPECT_EQ(nested->global_ranks(), (std::vector<int>{2, 4}));
      EXPECT_EQ(nested->rank(), rank / 2 - 1);
      sum_round(*nested, 7, "nested");
    }
  });
}

TEST(SubGroupTest, SplitByParityOrdersByKeyThenRank) {
  ThreadWorld world(kWorld);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> half = pg.split(rank % 2, -rank);
    ASSERT_NE(half, nullptr) << "rank " << rank;
    // key = -rank: the largest rank comes first.
    const std::vector<int> want =
        rank % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{5, 3, 1};
    EXPECT_EQ(half->global_ranks(), want) << "rank " << rank;
    EXPECT_EQ(half->rank(), (kWorld - 1 - rank) / 2) << "rank " << rank;
    EXPECT_EQ(half->group_rank(rank), half->rank());
    sum_round(*half, 1, "split");
    // Blocks of all_gather come in the sub-group's rank order.
    int32_t me = rank;
    std::vector<int32_t> all(3, -1);
    half->all_gather(&me, all.data(), 1, DType::kI32)->wait();
    EXPECT_EQ(all, want) << "rank " << rank;

    // A negative color joins nothing; equal keys fall back to rank order.
    std::shared_ptr<ProcessGroup> some = pg.split(rank < 2 ? -1 : 0, 0);
    if (rank < 2) {
      EXPECT_EQ(some, nullptr) << "rank " << rank;
    } else {
      ASSERT_NE(some, nullptr) << "rank " << rank;
      EXPECT_EQ(some->global_ranks(), (std::vector<int>{2, 3, 4, 5}));
      sum_round(*some, 2, "split of ranks 2..5");
    }
  });
}

TEST(SubGroupTest, SubGroupsRunConcurrentlyWithTheirParent) {
  ThreadWorld world(kWorld);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> evens = pg.new_group({0, 2, 4});
    std::shared_ptr<ProcessGroup> half = pg.split(rank % 2, -rank);
    ASSERT_NE(half, nullptr);
    constexpr int kRounds = 25;
    // Each rank issues on the parent from one thread and on its sub-groups from others.
    std::thread on_half([&] {
      for (int round = 0; round < kRounds; ++round) sum_round(*half, round, "split");
    });
    std::thread on_evens([&] {
      if (evens == nullptr) return;
      for (int round = 0; round < kRounds; ++round) sum_round(*evens, round, "evens");
    });
    for (int round = 0; round < kRounds; ++round) sum_round(pg, round, "world");
    on_half.join();
    on_evens.join();
  });
}

TEST(SubGroupTest, AsyncOperationsOnParentAndSubGroupInterleave) {
  ThreadWorld world(4);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> pair = pg.split(rank / 2, rank);  // {0,1} and {2,3}
    ASSERT_NE(pair, nullptr);
    // Issue on both without waiting, then wait in the opposite order.
    std::vector<int32_t> a(1000, rank + 1), b(1000, 10 * (rank + 1));
    WorkPtr on_world = pg.all_reduce(a.data(), a.size(), DType::kI32);
    WorkPtr on_pair = pair->all_reduce(b.data(), b.size(), DType::kI32);
    on_pair->wait();
    on_world->wait();
    const int32_t pair_sum = rank < 2 ? 10 * (1 + 2) : 10 * (3 + 4);
    EXPECT_EQ(a[999], 1 + 2 + 3 + 4);
    EXPECT_EQ(b[0], pair_sum);
  });
}

// This process's open file descriptors.
int open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (::readdir(dir) != nullptr) ++n;
  ::closedir(dir);
  return n;
}

TEST(SubGroupTest, SplitsOpenNoConnectionWhereNewGroupsDo) {
  ThreadWorld world(4);
  ASSERT_TRUE(world.ok());
  std::vector<int> counts;  // rank 0's, between barriers
  world.run([&](int rank, ProcessGroup& pg) {
    auto count = [&] {
      pg.barrier()->wait();
      if (rank == 0) counts.push_back(open_fds());
      pg.barrier()->wait();
    };
    count();
    std::shared_ptr<ProcessGroup> half = pg.split(rank % 2, rank);
    ASSERT_NE(half, nullptr);
    std::shared_ptr<ProcessGroup> nested = half->split(0, -rank);  // a split of a split
    ASSERT_NE(nested, nullptr);
    sum_round(*half, 1, "split");
    sum_round(*nested, 2, "split of a split");
    count();
    // A new group connects anew: the count above could have grown.
    std::shared_ptr<ProcessGroup> fresh = pg.new_group({0, 1, 2, 3});
    sum_round(*fresh, 3, "new_group");
    count();
  });
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts[1], counts[0]) << "a split opened descriptors";
  EXPECT_GT(counts[2], counts[1]) << "new_group opened none: the check above proves nothing";
}

TEST(SubGroupTest, SplitMessagesNeverMeetTheParentsAndNameTheSplitsRanks) {
  ThreadWorld world(4);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> reversed = pg.split(0, -rank);  // its rank 3 - rank
    ASSERT_NE(reversed, nullptr);
    ASSERT_EQ(reversed->rank(), 3 - rank);
    // World rank 3 sends on the split first, then on the world, with one tag; world rank
    // 2 receives the world's message first: it must not take the split's.
    int32_t split_value = 100, world_value = 200;
    if (rank == 3) {
      reversed->send(&split_value, 1, DType::kI32, /*dst=*/1, /*tag=*/5);
      pg.send(&world_value, 1, DType::kI32, /*dst=*/2, /*tag=*/5);
    } else if (rank == 2) {
      int32_t got = 0;
      pg.recv(&got, 1, DType::kI32, /*src=*/3, /*tag=*/5);
      EXPECT_EQ(got, 200);
      EXPECT_EQ(reversed->recv_any(&got, 1, DType::kI32, /*tag=*/5), 0);  // the split's rank
      EXPECT_EQ(got, 100);
    }
    pg.barrier()->wait();
  });
}

TEST(SubGroupTest, SplitAndParentRunDifferentCollectivesAtOnceEachCheckedOnItsOwn) {
  ThreadWorld world(4);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> half = pg.split(rank / 2, rank);  // {0,1}, {2,3}
    ASSERT_NE(half, nullptr);
    constexpr int kRounds = 40;
    // Collective #n of the split and #n of the world differ in operation and count: the
    // fingerprints of one context must never be held against the other's.
    std::thread on_half([&] {
      std::vector<int32_t> v(17);
      for (int round = 0; round < kRounds; ++round) {
        for (size_t i = 0; i < v.size(); ++i) v[i] = half->rank() == 1 ? round : -1;
        half->broadcast(v.data(), v.size(), DType::kI32, /*root=*/1)->wait();
        EXPECT_EQ(v[16], round) << "rank " << rank;
      }
    });
    std::exception_ptr failed;
    try {
      for (int round = 0; round < kRounds; ++round) sum_round(pg, round, "world");
    } catch (...) {
      failed = std::current_exception();
    }
    on_half.join();
    if (failed) std::rethrow_exception(failed);

    // And a split whose ranks disagree fails with a DesyncError naming both calls. A desync
    // fails the whole Engine, the world's context too (context_comm.h): every rank first
    // finishes its world rounds (told through the store, not the world's collectives).
    pg.store()->set("rounds_done/" + std::to_string(rank), "1");
    pg.store()->wait({"rounds_done/0", "rounds_done/1", "rounds_done/2", "rounds_done/3"});
    int32_t x[8] = {};
    WorkPtr work = half->rank() == 0 ? half->all_reduce(x, 8, DType::kI32)
                                     : half->broadcast(x, 8, DType::kI32, /*root=*/0);
    try {
      work->wait(Deadline::after(std::chrono::seconds(10)));
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const DesyncError& e) {
      const std::string text = e.what();
      EXPECT_TRUE(text.find("all_reduce") != std::string::npos &&
                  text.find("broadcast") != std::string::npos)
          << text;
    }
  });
}

TEST(SubGroupTest, ASplitsAbortFailsItOnEveryRankAndLeavesTheRestWorking) {
  ThreadWorld world(3, std::chrono::seconds(60));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> all = pg.split(0, rank);
    std::shared_ptr<ProcessGroup> pair = pg.split(rank < 2 ? 0 : -1, rank);  // ranks 0, 1
    ASSERT_NE(all, nullptr);
    sum_round(*all, 0, "split");
    // Rank 1 waits in a receive and an all_reduce of the split when rank 0 aborts it: both
    // fail (rank 0's notice), as everything later on the split does, on every rank; the
    // world and the other split go on.
    int32_t v = 1;
    WorkPtr recv, reduce;
    if (rank == 1) {
      recv = all->irecv(&v, 1, DType::kI32, /*src=*/2, /*tag=*/9);
      reduce = all->all_reduce(&v, 1, DType::kI32);
    }
    pg.barrier()->wait();
    if (rank == 0) all->abort();
    const Deadline soon = Deadline::after(std::chrono::seconds(10));
    if (rank == 1) {
      EXPECT_THROW(recv->wait(soon), PeerError);
      EXPECT_THROW(reduce->wait(soon), PeerError);
    }
    if (rank != 1) {
      try {  // rank 2: its part of the all_reduce, which rank 0 never joins
        all->all_reduce(&v, 1, DType::kI32)->wait(soon);
        ADD_FAILURE() << "rank " << rank << ": an all_reduce of the aborted split succeeded";
      } catch (const PeerError& e) {
        EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(all->all_reduce(&v, 1, DType::kI32)->wait(soon), PeerError) << "rank " << rank;
    for (int round = 1; round < 4; ++round) sum_round(pg, round, "world after the abort");
    if (pair) sum_round(*pair, 5, "the other split after the abort");
    std::shared_ptr<ProcessGroup> again = pg.split(0, rank);  // a new context
    ASSERT_NE(again, nullptr);
    sum_round(*again, 6, "a new split after the abort");
  });
}

}  // namespace
}  // namespace tdist::pg_test
