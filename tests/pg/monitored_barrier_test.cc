// ProcessGroup::monitored_barrier over the backend under test (TDIST_TEST_BACKEND) and
// over a user-registered backend that has no collectives at all: ranks as threads, each
// case with timeouts of a few hundred ms and its own bound on how long it may take. A
// rank that "never calls" is a thread that skips the call.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr milliseconds kTimeout{400};

milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

std::string what(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// Runs monitored_barrier on every rank but those in `skip`; returns what each threw and
// checks the whole round took at most `bound`.
std::vector<std::exception_ptr> round(ThreadWorld& world, const std::set<int>& skip,
                                      milliseconds timeout, bool wait_all, milliseconds bound) {
  const auto start = Clock::now();
  std::vector<std::exception_ptr> errors = world.run_collect([&](int r, ProcessGroup& pg) {
    if (skip.count(r) == 0) pg.monitored_barrier(timeout, wait_all);
  });
  EXPECT_LE(since(start), bound) << "the round took too long";
  return errors;
}

// Every rank outside `skip` threw a TimeoutError, all with the same text; returns it.
std::string common_timeout(const std::vector<std::exception_ptr>& errors,
                           const std::set<int>& skip) {
  std::string text;
  for (int r = 0; r < static_cast<int>(errors.size()); ++r) {
    const std::exception_ptr& e = errors[static_cast<size_t>(r)];
    if (skip.count(r) != 0) {
      EXPECT_EQ(e, nullptr) << "rank " << r << " did not call but threw";
      continue;
    }
    if (!is_a<TimeoutError>(e)) {
      ADD_FAILURE() << "rank " << r << ": expected a TimeoutError, got " << describe(e);
      continue;
    }
    if (text.empty()) text = what(e);
    EXPECT_EQ(what(e), text) << "rank " << r << " has another text";
  }
  return text;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' is not in: " << text;
}

std::string prefix(int n, int size, const std::string& backend = test_backend()) {
  return "monitored_barrier #" + std::to_string(n) + " (group of " + std::to_string(size) + ", " +
         backend + "): ";
}

TEST(MonitoredBarrier, AllRanksArriveRepeatedlyAndLeaveNoKeys) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  Store& store = *world.group(0).store();
  const int64_t keys_before = store.num_keys();
  const auto start = Clock::now();
  world.run([](int, ProcessGroup& pg) {
    for (int i = 0; i < 20; ++i) {
      pg.monitored_barrier(kTimeout, /*wait_all_ranks=*/i % 2 == 1);
      // Interleaved with collectives, which keep their own numbering.
      int64_t v = 1;
      pg.all_reduce(&v, 1, DType::kI64)->wait();
      EXPECT_EQ(v, pg.size());
    }
  });
  EXPECT_LE(since(start), seconds(5));
  EXPECT_EQ(store.num_keys(), keys_before);
  for (int n = 0; n < 20; ++n) {
    const std::string base = "monitored_barrier/" + std::to_string(n) + "/";
    EXPECT_FALSE(store.check({base + "result"})) << base;
    EXPECT_FALSE(store.check({base + "done"})) << base;
    for (int r = 0; r < 4; ++r) EXPECT_FALSE(store.check({base + "arrived/" + std::to_string(r)}));
  }
}

TEST(MonitoredBarrier, DefaultTimeoutIsTheGroupsAndAllArrive) {
  ThreadWorld world(3, kTimeout);
  ASSERT_TRUE(world.ok());
  const auto start = Clock::now();
  world.run([](int, ProcessGroup& pg) { pg.monitored_barrier(); });
  EXPECT_LE(since(start), seconds(3));
}

TEST(MonitoredBarrier, WorldOfOneReturnsAtOnce) {
  ThreadWorld world(1, seconds(10));
  ASSERT_TRUE(world.ok());
  const auto start = Clock::now();
  world.group(0).monitored_barrier();
  world.group(0).monitored_barrier(milliseconds(0), true);
  EXPECT_LT(since(start), seconds(5));  // not the group's timeout (10 s)
}

TEST(MonitoredBarrier, NegativeTimeoutIsInvalidArgument) {
  ThreadWorld world(1, seconds(10));
  ASSERT_TRUE(world.ok());
  EXPECT_THROW(world.group(0).monitored_barrier(milliseconds(-1)), InvalidArgument);
}

TEST(MonitoredBarrier, MissingRankIsNamedByEveryRank) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  const auto start = Clock::now();
  auto errors = round(world, {2}, kTimeout, false, seconds(3));
  // Rank 0 gives up at its deadline, not before, and the others hear it from rank 0.
  EXPECT_GE(since(start), kTimeout - milliseconds(20));
  const std::string text = common_timeout(errors, {2});
  expect_contains(text, prefix(0, 4) + "rank 2 did not arrive within 400 ms");
}

TEST(MonitoredBarrier, WaitAllRanksNamesEveryMissingRank) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  auto errors = round(world, {2, 3}, kTimeout, true, seconds(3));
  const std::string text = common_timeout(errors, {2, 3});
  expect_contains(text, prefix(0, 4) + "ranks 2, 3 did not arrive within 400 ms");
}

TEST(MonitoredBarrier, WithoutWaitAllRanksNamesTheLowestMissingRank) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  auto errors = round(world, {2, 3}, kTimeout, false, seconds(3));
  const std::string text = common_timeout(errors, {2, 3});
  expect_contains(text, prefix(0, 4) + "rank 2 did not arrive within 400 ms");
  EXPECT_EQ(text.find("rank 3"), std::string::npos) << text;
  EXPECT_EQ(text.find("ranks"), std::string::npos) << text;
}

TEST(MonitoredBarrier, MissingRankZeroIsNamedByTheOthers) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  // The others wait for rank 0's answer for the timeout plus a margin (1 s).
  auto errors = round(world, {0}, kTimeout, false, seconds(4));
  for (int r = 1; r < 4; ++r) {
    const std::exception_ptr& e = errors[static_cast<size_t>(r)];
    ASSERT_TRUE(is_a<TimeoutError>(e)) << "rank " << r << ": " << describe(e);
    expect_contains(what(e), prefix(0, 4) + "rank 0 did not answer rank " + std::to_string(r));
  }
}

TEST(MonitoredBarrier, LateRankGetsTheSameErrorAndTheNextCallWorks) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  const auto start = Clock::now();
  std::vector<milliseconds> late_took(1);
  auto errors = world.run_collect([&](int r, ProcessGroup& pg) {
    if (r == 2) {
      std::this_thread::sleep_for(kTimeout + milliseconds(300));
      const auto t = Clock::now();
      try {
        pg.monitored_barrier(kTimeout);
      } catch (...) {
        late_took[0] = since(t);
        throw;
      }
    } else {
      pg.monitored_barrier(kTimeout);
    }
  });
  EXPECT_LE(since(start), seconds(3));
  const std::string text = common_timeout(errors, {});
  expect_contains(text, prefix(0, 4) + "rank 2 did not arrive within 400 ms");
  // The late rank found rank 0's verdict waiting for it: it did not wait for its own timeout
  // and the margin it gives rank 0 (1 s) as it would have without one.
  EXPECT_LT(late_took[0], kTimeout + seconds(1));
  // Every rank made call #0, so call #1 pairs up again.
  auto next = round(world, {}, kTimeout, false, seconds(3));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(next[static_cast<size_t>(r)], nullptr) << describe(next[static_cast<size_t>(r)]);
}

TEST(MonitoredBarrier, FreshGroupAfterAFailureWorksAndNamesGlobalRanks) {
  ThreadWorld world(4, seconds(10));
  ASSERT_TRUE(world.ok());
  auto errors = round(world, {2}, kTimeout, false, seconds(3));
  expect_contains(common_timeout(errors, {2}), "rank 2 did not arrive");

  // Rank 2 never made call #0 on the world; a fresh group has its own count. Each rank
  // makes and drops its sub-groups on its own thread (teardown may wait for peers).
  std::vector<std::exception_ptr> all_ok(4), tail_missing_1(4), tail_missing_0(4);
  const auto start = Clock::now();
  world.run([&](int r, ProcessGroup& pg) {
    std::shared_ptr<ProcessGroup> all = pg.new_group({0, 1, 2, 3});
    std::shared_ptr<ProcessGroup> tail = pg.new_group({1, 2, 3});
    std::shared_ptr<ProcessGroup> tail2 = pg.new_group({1, 2, 3});
    ASSERT_NE(all, nullptr);
    ASSERT_EQ(tail == nullptr, r == 0);
    auto call = [](ProcessGroup& g, std::exception_ptr& error) {
      try {
        g.monitored_barrier(kTimeout);
      } catch (...) {
        error = std::current_exception();
      }
    };
    call(*all, all_ok[static_cast<size_t>(r)]);
    if (tail != nullptr) {
      // In {1, 2, 3}, group rank 1 is global rank 2: it stays away from tail's call; group
      // rank 0, global rank 1, from tail2's.
      if (tail->rank() != 1) call(*tail, tail_missing_1[static_cast<size_t>(tail->rank())]);
      if (tail2->rank() != 0) call(*tail2, tail_missing_0[static_cast<size_t>(tail2->rank())]);
    }
    // Drop the groups together.
    pg.barrier()->wait();
  });
  EXPECT_LE(since(start), seconds(6));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(all_ok[static_cast<size_t>(r)], nullptr) << describe(all_ok[static_cast<size_t>(r)]);
  }
  tail_missing_1.resize(3);
  expect_contains(common_timeout(tail_missing_1, {1}),
                  prefix(0, 3) + "rank 1 (global rank 2) did not arrive within 400 ms");
  for (int i = 1; i < 3; ++i) {
    const std::exception_ptr& e = tail_missing_0[static_cast<size_t>(i)];
    ASSERT_TRUE(is_a<TimeoutError>(e)) << describe(e);
    expect_contains(what(e), prefix(0, 3) + "rank 0 (global rank 1) did not answer rank " +
                                 std::to_string(i) + " (global rank " + std::to_string(i + 1) +
                                 ")");
  }
}

// ---- a user's backend without collectives -----------------------------------------------

// Every collective and point-to-point call fails: monitored_barrier must not use them.
class NoCollectivesGroup : public ProcessGroup {
 public:
  NoCollectivesGroup(std::shared_ptr<Store> store, int rank, int size, milliseconds timeout)
      : ProcessGroup(std::move(store), rank, size, timeout) {}
  std::string backend_name() const override { return "no_collectives"; }
  void abort() override {}

 protected:
  [[noreturn]] static WorkPtr fail() { TDIST_THROW(Error, "no_collectives: not implemented"); }
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store>, int, int,
                                              std::vector<int>) override {
    fail();
  }
  WorkPtr do_all_reduce(uint64_t, const void*, void*, size_t, DType, ReduceOp) override { fail(); }
  WorkPtr do_broadcast(uint64_t, void*, size_t, DType, int) override { fail(); }
  WorkPtr do_reduce(uint64_t, const void*, void*, size_t, DType, ReduceOp, int) override { fail(); }
  WorkPtr do_all_gather(uint64_t, const void*, void*, size_t, DType) override { fail(); }
  WorkPtr do_all_gatherv(uint64_t, const void*, size_t, void*, std::span<const size_t>,
                         DType) override {
    fail();
  }
  WorkPtr do_gather(uint64_t, const void*, void*, size_t, DType, int) override { fail(); }
  WorkPtr do_scatter(uint64_t, const void*, void*, size_t, DType, int) override { fail(); }
  WorkPtr do_reduce_scatter(uint64_t, const void*, void*, size_t, DType, ReduceOp) override {
    fail();
  }
  WorkPtr do_all_to_all(uint64_t, const void*, void*, size_t, DType) override { fail(); }
  WorkPtr do_all_to_allv(uint64_t, const void*, std::span<const size_t>, void*,
                         std::span<const size_t>, DType) override {
    fail();
  }
  WorkPtr do_barrier(uint64_t) override { fail(); }
  WorkPtr do_batch_isend_irecv(std::span<const P2POp>) override { fail(); }
};

const std::string& no_collectives_backend() {
  static const std::string name = [] {
    register_backend("no_collectives", [](std::shared_ptr<Store> store, int rank, int size,
                                          milliseconds timeout) {
      return std::make_shared<NoCollectivesGroup>(std::move(store), rank, size, timeout);
    });
    return std::string("no_collectives");
  }();
  return name;
}

TEST(MonitoredBarrier, UserBackendWithoutCollectivesHasIt) {
  ThreadWorld world(4, seconds(10), no_collectives_backend());
  ASSERT_TRUE(world.ok());
  const int64_t keys_before = world.store()->num_keys();
  auto errors = round(world, {}, kTimeout, false, seconds(3));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(errors[static_cast<size_t>(r)], nullptr) << describe(errors[static_cast<size_t>(r)]);
  EXPECT_EQ(world.store()->num_keys(), keys_before);

  errors = round(world, {3}, kTimeout, true, seconds(3));
  expect_contains(common_timeout(errors, {3}),
                  prefix(1, 4, "no_collectives") + "rank 3 did not arrive within 400 ms");
}

}  // namespace
}  // namespace tdist::pg_test
