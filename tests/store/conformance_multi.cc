// Store conformance suite, part 2: many clients at once — threads each with their own client,
// exact totals from concurrent adds, and (for stores with connect()) forked processes that
// meet through the store, including a barrier built from add and wait.
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "store/conformance.h"
#include "tdist/error.h"

namespace tdist_test {
namespace {

using std::chrono::milliseconds;
using tdist::Bytes;
using tdist::Deadline;
using tdist::Store;
using tdist::to_bytes;
using tdist::to_string;

constexpr int kChildren = 4;

TEST_P(StoreConformance, ConcurrentAddsAreExact) {
  constexpr int kThreads = 8;
  const int kAddsPerThread = GetParam().concurrent_adds;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(client());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kAddsPerThread; ++i) clients[t]->add("total", (t % 2 == 0) ? 2 : 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(failures.load(), 0);
  const int64_t kTotal = (kThreads / 2) * kAddsPerThread * 3;
  EXPECT_EQ(store().add("total", 0), kTotal);
  EXPECT_EQ(store().get("total", Deadline::after(kReleaseWait)), to_bytes(std::to_string(kTotal)));
}

TEST_P(StoreConformance, ConcurrentClientsFromThreads) {
  constexpr int kThreads = 4;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(client());
  std::vector<std::string> keys;
  for (int t = 0; t < kThreads; ++t) keys.push_back("member/" + std::to_string(t));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Store& s = *clients[t];
        s.set(keys[t], std::string_view("rank" + std::to_string(t)));
        s.add("joined", 1);
        auto values = s.multi_get(keys, Deadline::after(kReleaseWait));
        for (int u = 0; u < kThreads; ++u) {
          EXPECT_EQ(to_string(values[u]), "rank" + std::to_string(u));
        }
        s.append("trail", to_bytes(std::to_string(t)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store().add("joined", 0), kThreads);
  EXPECT_EQ(store().get("trail", Deadline::after(kReleaseWait)).size(), size_t{kThreads});
}

TEST_P(StoreCrossProcess, ConcurrentClientsFromProcesses) {
  ASSERT_TRUE(can_fork()) << GetParam().name << " has no connect()";
  const auto connect = GetParam().connect;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pids.push_back(fork_child([&, c] {
      auto s = connect();
      const auto deadline = Deadline::after(kReleaseWait);
      s->add("children", 1);
      if (tdist::to_string(s->get("go", deadline)) != "now") return 2;  // parent's key
      s->set("child/" + std::to_string(c), std::string_view("hello " + std::to_string(c)));
      s->add("children_done", 1);
      return 0;
    }));
  }
  store().set("go", std::string_view("now"));
  std::vector<std::string> keys;
  for (int c = 0; c < kChildren; ++c) keys.push_back("child/" + std::to_string(c));
  const auto deadline = Deadline::after(kReleaseWait);
  auto values = store().multi_get(keys, deadline);
  for (int c = 0; c < kChildren; ++c) {
    EXPECT_EQ(to_string(values[c]), "hello " + std::to_string(c));
  }
  EXPECT_EQ(wait_children(pids, deadline), "");
  EXPECT_EQ(store().add("children", 0), kChildren);
  EXPECT_EQ(store().add("children_done", 0), kChildren);
}

// A barrier from add + wait: the last to arrive in a round sets the round's "done" key.
void barrier(Store& s, int round, int participants, Deadline deadline) {
  const std::string prefix = "barrier/" + std::to_string(round);
  if (s.add(prefix + "/count", 1) == participants) s.set(prefix + "/done", std::string_view("1"));
  s.wait({prefix + "/done"}, deadline);
}

TEST_P(StoreCrossProcess, BarrierAcrossProcesses) {
  ASSERT_TRUE(can_fork()) << GetParam().name << " has no connect()";
  constexpr int kParticipants = kChildren + 1;  // the children and this process
  constexpr int kRounds = 3;
  const auto connect = GetParam().connect;

  // Each participant marks its arrival for a round, passes the barrier, then checks that
  // everyone has arrived: no one may pass before the last arrival.
  auto run = [](Store& s, int id, Deadline deadline) {
    for (int round = 0; round < kRounds; ++round) {
      const std::string r = std::to_string(round);
      s.set("arrived/" + r + "/" + std::to_string(id), std::string_view("1"));
      barrier(s, round, kParticipants, deadline);
      std::vector<std::string> everyone;
      for (int p = 0; p < kParticipants; ++p)
        everyone.push_back("arrived/" + r + "/" + std::to_string(p));
      if (!s.check(everyone)) return 3;
    }
    return 0;
  };

  const auto deadline = Deadline::after(kReleaseWait);
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pids.push_back(fork_child([&, c] { return run(*connect(), c + 1, deadline); }));
  }
  // Arrive last-ish in the first round, so the children really block.
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(run(store(), 0, deadline), 0);
  EXPECT_EQ(wait_children(pids, deadline), "");
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(store().add("barrier/" + std::to_string(round) + "/count", 0), kParticipants);
  }
}

}  // namespace
}  // namespace tdist_test
