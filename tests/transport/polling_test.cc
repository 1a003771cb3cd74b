// Poll, then sleep (core/polling.h): the policy, and every transport exchanging
// messages correctly whichever way its waiters wait (polling, sleeping at once, from a
// background thread).
#include "core/polling.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "comm_factories.h"
#include "support/scoped_env.h"
#include "tdist/error.h"

namespace tdist::transport {

using namespace tdist::core;  // the policy (core/polling.h)
namespace {

using namespace std::chrono_literals;
using testing::comm_factories;
using testing::CommFactory;

using test_support::ScopedEnv;

TEST(PollBudgetTest, ShrinksOnLongWaitsToAFloorAndGrowsOnShortOnes) {
  PollBudget budget(std::chrono::microseconds(1024));
  EXPECT_EQ(budget.current(), 1024us);
  budget.record(2ms);
  EXPECT_EQ(budget.current(), 512us);
  for (int i = 0; i < 20; ++i) budget.record(1s);
  EXPECT_EQ(budget.current(), 32us);  // 1/32 of the limit
  budget.record(900us);               // within the limit, though longer than the budget
  EXPECT_EQ(budget.current(), 64us);
  for (int i = 0; i < 20; ++i) budget.record(1us);
  EXPECT_EQ(budget.current(), 1024us);
}

TEST(PollBudgetTest, AZeroLimitNeverPolls) {
  PollBudget budget(0ns);
  budget.record(0ns);
  EXPECT_EQ(budget.current(), 0ns);
}

TEST(BackgroundThreadTest, MarksTheScopeAndNests) {
  EXPECT_FALSE(on_background_thread());
  {
    BackgroundThread outer;
    EXPECT_TRUE(on_background_thread());
    {
      BackgroundThread inner;
      EXPECT_TRUE(on_background_thread());
    }
    EXPECT_TRUE(on_background_thread());
    bool other = true;
    std::thread([&] { other = on_background_thread(); }).join();
    EXPECT_FALSE(other);  // per thread
  }
  EXPECT_FALSE(on_background_thread());
}

TEST(PollLimitTest, FollowsTheSettingAndTheCores) {
  ScopedEnv lws("LOCAL_WORLD_SIZE", "1");
  {
    ScopedEnv poll("TDIST_POLL_US", "250");
    EXPECT_EQ(poll_limit(1), 250us);
    // More local ranks than cores: sleep at once.
    EXPECT_EQ(poll_limit(usable_cores() + 1), 0ns);
  }
  {
    ScopedEnv poll("TDIST_POLL_US", "0");
    EXPECT_EQ(poll_limit(1), 0ns);
  }
  for (const char* bad : {"-1", "2000000", "fast"}) {
    ScopedEnv poll("TDIST_POLL_US", bad);
    EXPECT_THROW(poll_limit(1), InvalidArgument) << bad;
  }
}

TEST(PollLimitTest, CountsTheCpusOfTheCommsLocalRanksTogether) {
  ScopedEnv lws("LOCAL_WORLD_SIZE", "2");
  ScopedEnv poll("TDIST_POLL_US", "250");
  EXPECT_EQ(poll_limit(2, 2), 250us);  // two ranks pinned to a core each
  EXPECT_EQ(poll_limit(2, 1), 0ns);    // both on one core
  EXPECT_EQ(poll_limit(3, 2), 0ns);
  EXPECT_EQ(poll_limit(1, 1), 0ns);  // the launcher's two ranks on one core
}

TEST(AffinityTest, ListsThisProcesssCpusAndCountsUnions) {
  EXPECT_EQ(union_cpu_count({affinity_list()}), usable_cores()) << affinity_list();
  EXPECT_EQ(union_cpu_count({"0", "1"}), 2);
  EXPECT_EQ(union_cpu_count({"0", "0"}), 1);
  EXPECT_EQ(union_cpu_count({"0-3", "2-5,8"}), 7);
  EXPECT_EQ(union_cpu_count({"", "x", "3-1"}), 0);
  EXPECT_EQ(union_cpu_count({"1,x,5"}), 1);  // stops at what it cannot read
}

TEST(PollLimitTest, CountsTheLaunchersLocalRanks) {
  {
    ScopedEnv lws("LOCAL_WORLD_SIZE", std::to_string(usable_cores() + 1).c_str());
    EXPECT_EQ(launcher_local_ranks(), usable_cores() + 1);
    EXPECT_EQ(poll_limit(1), 0ns);
  }
  ScopedEnv lws("LOCAL_WORLD_SIZE", "");
  ScopedEnv slurm("SLURM_NTASKS_PER_NODE", "3(x2),1");
  EXPECT_EQ(launcher_local_ranks(), 3);
}

enum class Waiting { kPolling, kSleeping, kBackground };

struct Case {
  CommFactory factory;
  Waiting waiting;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const char* how[] = {"polling", "sleeping", "background"};
  return info.param.factory.name + "_" + how[static_cast<int>(info.param.waiting)];
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const CommFactory& f : comm_factories()) {
    for (Waiting w : {Waiting::kPolling, Waiting::kSleeping, Waiting::kBackground}) {
      out.push_back({f, w});
    }
  }
  return out;
}

class PollingCommTest : public ::testing::TestWithParam<Case> {};

// Ping-pong of small messages and of messages larger than a ring, 4 ranks in pairs,
// with waiters that poll, sleep at once, or are background threads (which never poll).
TEST_P(PollingCommTest, ExchangesCorrectlyHoweverItWaits) {
  const Case& c = GetParam();
  ScopedEnv lws("LOCAL_WORLD_SIZE", "1");
  ScopedEnv poll("TDIST_POLL_US", c.waiting == Waiting::kSleeping ? "0" : "1000");
  testing::run_factory_ranks(c.factory, 4, [&](Comm& comm) {
    std::optional<BackgroundThread> background;
    if (c.waiting == Waiting::kBackground) background.emplace();
    const int peer = comm.rank() ^ 1;
    for (size_t bytes : {size_t{8}, size_t{1000}, size_t{200 * 1000}}) {
      for (uint64_t round = 0; round < 50; ++round) {
        const auto out = testing::pattern(round * 2 + comm.rank(), bytes);
        std::vector<uint8_t> in(bytes);
        auto r = comm.irecv(peer, round, in.data(), bytes);
        auto s = comm.isend(peer, round, out.data(), bytes);
        r->wait(Deadline::after(20s));
        s->wait(Deadline::after(20s));
        ASSERT_EQ(in, testing::pattern(round * 2 + peer, bytes)) << bytes << " " << round;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, PollingCommTest, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tdist::transport
