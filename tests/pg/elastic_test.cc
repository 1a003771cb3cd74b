// ElasticGroup's generations and ProcessGroup::shrink, with ranks as threads over one
// HashStore (which outlives them, as tdistrun's store does): a replacement keeps the ranks,
// a missing slot is left out after the join window (or at once when marked gone), a member
// that comes back late is refused, one with another job's token too, the vote, and shrink's
// checks. The real thing (SIGKILL
// under tdistrun) is tests/torch/elastic_process_test.cc.
#include "tdist/elastic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pg_test_util.h"
#include "tdist/hash_store.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using pg_test::describe;
using pg_test::ThreadWorld;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ElasticOptions options(milliseconds window = milliseconds(20'000)) {
  ElasticOptions o;
  o.backend = pg_test::test_backend();
  o.timeout = milliseconds(30'000);
  o.join_window = window;
  return o;
}

// Every slot joins generation 0 at once.
std::vector<std::unique_ptr<ElasticGroup>> start(const std::shared_ptr<Store>& store, int slots,
                                                 const ElasticOptions& o) {
  std::vector<std::unique_ptr<ElasticGroup>> jobs(static_cast<size_t>(slots));
  auto errors = ThreadWorld::for_each_rank(
      slots, [&](int s) { jobs[static_cast<size_t>(s)] = ElasticGroup::join(store, s, slots, o); });
  for (int s = 0; s < slots; ++s) {
    EXPECT_EQ(errors[static_cast<size_t>(s)], nullptr) << describe(errors[static_cast<size_t>(s)]);
  }
  return jobs;
}

// The sum over the group of (slot + 1), on every member: the group works, with these members.
void expect_sum(ElasticGroup& job, int64_t want) {
  int64_t v = job.slot() + 1;
  job.group()->all_reduce(&v, 1, DType::kI64)->wait();
  EXPECT_EQ(v, want) << "slot " << job.slot() << " generation " << job.generation();
}

TEST(ElasticGroupTest, GenerationZeroKeepsTheRanks) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 3, options());
  ThreadWorld::for_each_rank(3, [&](int s) {
    ElasticGroup& job = *jobs[static_cast<size_t>(s)];
    EXPECT_EQ(job.generation(), 0);
    EXPECT_EQ(job.rank(), s);
    EXPECT_EQ(job.size(), 3);
    EXPECT_FALSE(job.newcomer());
    expect_sum(job, 6);
  });
}

TEST(ElasticGroupTest, AReplacementTakesTheDeadSlotAndTheRanksStay) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 4, options());
  jobs[2].reset();  // slot 2 dies
  auto errors = ThreadWorld::for_each_rank(4, [&](int s) {
    if (s == 2) {
      std::this_thread::sleep_for(milliseconds(100));  // a replacement starting up
      jobs[2] = ElasticGroup::join(store, 2, 4, options());
      EXPECT_TRUE(jobs[2]->newcomer());
    } else {
      jobs[static_cast<size_t>(s)]->reconfigure();
    }
    ElasticGroup& job = *jobs[static_cast<size_t>(s)];
    EXPECT_EQ(job.generation(), 1);
    EXPECT_EQ(job.rank(), s);
    EXPECT_EQ(job.members(), (std::vector<int>{0, 1, 2, 3}));
    expect_sum(job, 10);
  });
  for (auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
}

TEST(ElasticGroupTest, AMissingSlotIsLeftOutAfterTheWindowAndRanksAreRenumbered) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 4, options(milliseconds(300)));
  jobs[1].reset();
  auto errors = ThreadWorld::for_each_rank(4, [&](int s) {
    if (s == 1) return;
    ElasticGroup& job = *jobs[static_cast<size_t>(s)];
    job.reconfigure();
    EXPECT_EQ(job.generation(), 1);
    EXPECT_EQ(job.size(), 3);
    EXPECT_EQ(job.members(), (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(job.rank(), s == 0 ? 0 : s - 1);
    expect_sum(job, 1 + 3 + 4);
  });
  for (auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
}

TEST(ElasticGroupTest, ASlotMarkedGoneIsNotAwaited) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 3, options(milliseconds(60'000)));
  jobs[2].reset();
  ElasticGroup::mark_slot_gone(*store, 2);  // as tdistrun does when it will not replace it
  const auto t0 = Clock::now();
  auto errors = ThreadWorld::for_each_rank(2, [&](int s) {
    jobs[static_cast<size_t>(s)]->reconfigure();
    expect_sum(*jobs[static_cast<size_t>(s)], 3);
  });
  for (auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
  EXPECT_LT(Clock::now() - t0, milliseconds(20'000)) << "waited for the join window";
}

TEST(ElasticGroupTest, AMemberThatComesBackLateIsRefusedAndTheOthersGoOn) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 3, options(milliseconds(300)));
  std::atomic<bool> moved_on{false};
  std::string stale_error;
  auto errors = ThreadWorld::for_each_rank(3, [&](int s) {
    ElasticGroup& job = *jobs[static_cast<size_t>(s)];
    if (s == 2) {  // frozen until the others formed generation 1 without it
      while (!moved_on.load()) std::this_thread::sleep_for(milliseconds(5));
      try {
        job.reconfigure();
        ADD_FAILURE() << "a late member was let in";
      } catch (const StaleMemberError& e) {
        stale_error = e.what();
      }
      return;
    }
    job.reconfigure();
    moved_on = true;
    EXPECT_EQ(job.size(), 2);
    expect_sum(job, 3);
  });
  for (auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
  EXPECT_NE(stale_error.find("slot 2"), std::string::npos) << stale_error;
  EXPECT_NE(stale_error.find("generation 1 closed without it"), std::string::npos) << stale_error;
}

TEST(ElasticGroupTest, TheVoteIsTrueOnlyWhenEveryRankSaysOk) {
  auto store = std::make_shared<HashStore>();
  auto jobs = start(store, 3, options());
  ThreadWorld::for_each_rank(3, [&](int s) {
    ElasticGroup& job = *jobs[static_cast<size_t>(s)];
    EXPECT_TRUE(job.commit(true));
    EXPECT_FALSE(job.commit(s != 1));
  });
}

TEST(ElasticGroupTest, BadInputIsRefused) {
  auto store = std::make_shared<HashStore>();
  EXPECT_THROW(ElasticGroup::join(store, 3, 3, options()), InvalidArgument);
  EXPECT_THROW(ElasticGroup::join(nullptr, 0, 3, options()), InvalidArgument);
  ElasticOptions o = options();
  o.backend = "no-such-backend";
  EXPECT_THROW(ElasticGroup::join(store, 0, 1, o), InvalidArgument);
  o = options();
  o.min_size = 4;
  EXPECT_THROW(ElasticGroup::join(store, 0, 3, o), InvalidArgument);
}

TEST(ElasticGroupTest, AStoreThatRankZeroHostsIsRefused) {
  try {
    ElasticGroup::join(options(), "tcp://127.0.0.1:1?rank=0&world_size=1");
    ADD_FAILURE() << "joined on a store rank 0 hosts";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("its death would end the job"), std::string::npos)
        << e.what();
  }
}

TEST(ElasticGroupTest, AProcessWithAnotherTokenIsRefusedAndTheJobGoesOn) {
  test_support::ScopedEnv job_token("TDIST_AUTH_TOKEN", "the-job-token");  // the transports'
  auto server = TCPStoreServer::start("127.0.0.1", 0, std::string("the-job-token"));
  TCPStoreOptions o;
  o.port = server->port();
  o.auth_token = "the-job-token";
  std::vector<std::unique_ptr<ElasticGroup>> jobs(2);
  auto errors = ThreadWorld::for_each_rank(2, [&](int s) {  // a client each, as processes
    jobs[static_cast<size_t>(s)] =
        ElasticGroup::join(std::make_shared<TCPStore>("127.0.0.1", o), s, 2, options());
  });
  for (auto& e : errors) ASSERT_EQ(e, nullptr) << describe(e);
  {
    test_support::ScopedEnv agent("TDIST_AGENT_STORE",
                                  ("127.0.0.1:" + std::to_string(o.port)).c_str());
    test_support::ScopedEnv prefix("TDIST_AGENT_STORE_PREFIX", "");
    test_support::ScopedEnv rank("RANK", "1");
    test_support::ScopedEnv world("WORLD_SIZE", "2");
    test_support::ScopedEnv token("TDIST_AUTH_TOKEN", "another-token");
    ElasticOptions late = options();
    late.timeout = milliseconds(5'000);
    try {
      ElasticGroup::join(late);
      ADD_FAILURE() << "a process with another token joined";
    } catch (const AuthError& e) {
      EXPECT_NE(std::string(e.what()).find("elastic: slot 1 was refused by the job's store"),
                std::string::npos)
          << e.what();
    }
  }
  ThreadWorld::for_each_rank(2, [&](int s) { expect_sum(*jobs[static_cast<size_t>(s)], 3); });
}

TEST(ShrinkTest, TheRemainingRanksGoOnWithoutTheExcluded) {
  ThreadWorld world(4);
  ASSERT_TRUE(world.ok());
  world.shared(3)->abort();
  std::vector<std::shared_ptr<ProcessGroup>> shrunk(3);
  auto errors = ThreadWorld::for_each_rank(3, [&](int r) {
    world.group(r).abort();  // what the survivors do after the failure
    shrunk[static_cast<size_t>(r)] = world.group(r).shrink({3});
    ProcessGroup& g = *shrunk[static_cast<size_t>(r)];
    EXPECT_EQ(g.size(), 3);
    EXPECT_EQ(g.rank(), r);
    int64_t v = r + 1;
    g.all_reduce(&v, 1, DType::kI64)->wait();
    EXPECT_EQ(v, 6);
    // Excluding a middle rank renumbers the ones above it.
    std::shared_ptr<ProcessGroup> two = r == 1 ? nullptr : g.shrink({1});
    if (two) {
      EXPECT_EQ(two->rank(), r == 0 ? 0 : 1);
      EXPECT_EQ(two->global_rank(two->rank()), r);
    }
  });
  for (auto& e : errors) EXPECT_EQ(e, nullptr) << describe(e);
}

TEST(ShrinkTest, BadInputIsRefused) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  EXPECT_THROW(world.group(0).shrink({0}), InvalidArgument);
  EXPECT_THROW(world.group(0).shrink({2}), InvalidArgument);
  EXPECT_THROW(world.group(0).shrink({1, 1}), InvalidArgument);
  EXPECT_THROW(world.group(0).shrink({-1}), InvalidArgument);
}

}  // namespace
}  // namespace tdist
