// NodeRendezvous: agents as threads of this process, meeting over a real TCPStore that the
// first agent hosts on 127.0.0.1 (port 0); the others connect to its real port.
#include "tdistrun/node_rdzv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Agents = std::vector<std::unique_ptr<NodeRendezvous>>;

NodeRdzvConfig config(int min_nodes, int max_nodes) {
  NodeRdzvConfig c;
  c.host = "127.0.0.1";
  c.run_id = "job";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.join_timeout = 10s;
  c.last_call_timeout = 200ms;
  c.heartbeat_timeout = 2s;
  return c;
}

// Agent k of a job: agent 0 hosts on a free port, the others connect to `port`.
std::unique_ptr<NodeRendezvous> agent(NodeRdzvConfig c, int k, uint16_t port) {
  c.is_host = k == 0;
  c.port = k == 0 ? 0 : port;
  c.hostname = "node" + std::to_string(k);
  c.node_addr = "10.9.0." + std::to_string(k + 1);
  return std::make_unique<NodeRendezvous>(c);
}

Agents agents(const NodeRdzvConfig& c, int n) {
  Agents out;
  for (int k = 0; k < n; ++k) out.push_back(agent(c, k, k == 0 ? 0 : out[0]->store_port()));
  return out;
}

std::vector<Round> join_some(const std::vector<NodeRendezvous*>& list) {
  std::vector<std::future<Round>> futures;
  for (NodeRendezvous* a : list) {
    futures.push_back(std::async(std::launch::async, [a] { return a->join(); }));
  }
  std::vector<Round> rounds;
  for (auto& f : futures) rounds.push_back(f.get());
  return rounds;
}

std::vector<Round> join_all(const Agents& list) {
  std::vector<NodeRendezvous*> raw;
  for (const auto& a : list) raw.push_back(a.get());
  return join_some(raw);
}

template <typename E, typename F>
void expect_throw_with(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no exception; wanted one containing: " << text;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

TEST(NodeRendezvous, SingleNodeHostsAndJoinsFast) {
  NodeRdzvConfig c = config(1, 1);
  c.local_world_size = 8;  // is_host and port left unset: 127.0.0.1 is local, so it hosts
  NodeRendezvous a(c);
  ASSERT_TRUE(a.is_host());
  EXPECT_NE(a.store_port(), 0);
  EXPECT_EQ(a.node_addr(), "127.0.0.1");  // the route to the endpoint
  auto start = Clock::now();
  Round r = a.join();
  std::printf("single-node join() took %.3f ms\n", ms_since(start));
  EXPECT_EQ(r.round, 0);
  EXPECT_EQ(r.restart_count, 0);
  EXPECT_EQ(r.node_rank, 0);
  EXPECT_EQ(r.num_nodes, 1);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.rank_offset, 0);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].local_world_size, 8);
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_NE(r.master_port, 0);
  EXPECT_EQ(r.worker_prefix, "tdistrun/job/r/0/w/");
  EXPECT_EQ(a.check(), std::nullopt);
  EXPECT_EQ(a.finish(), Outcome::kDone);
  expect_throw_with<Error>([&] { a.join(); }, "job 'job' already finished");
}

TEST(NodeRendezvous, ThreeNodesGetRanksAndOffsets) {
  NodeRdzvConfig c = config(3, 3);
  Agents list;
  for (int k = 0; k < 3; ++k) {
    c.local_world_size = k + 2;  // 2, 3, 4
    list.push_back(agent(c, k, k == 0 ? 0 : list[0]->store_port()));
  }
  std::vector<Round> rounds = join_all(list);
  std::vector<int> ranks;
  for (int k = 0; k < 3; ++k) {
    const Round& r = rounds[k];
    ranks.push_back(r.node_rank);
    EXPECT_EQ(r.num_nodes, 3);
    EXPECT_EQ(r.world_size, 9);
    EXPECT_EQ(r.nodes[r.node_rank].hostname, "node" + std::to_string(k));
    EXPECT_EQ(r.nodes[r.node_rank].local_world_size, k + 2);
    int offset = 0;
    for (int n = 0; n < r.node_rank; ++n) offset += r.nodes[n].local_world_size;
    EXPECT_EQ(r.rank_offset, offset);
    // Everybody agrees on the node table and the master.
    for (int n = 0; n < 3; ++n) {
      EXPECT_EQ(r.nodes[n].node_rank, n);
      EXPECT_EQ(r.nodes[n].hostname, rounds[0].nodes[n].hostname);
      EXPECT_EQ(r.nodes[n].addr, rounds[0].nodes[n].addr);
    }
    EXPECT_EQ(r.master_addr, r.nodes[0].addr);
    EXPECT_EQ(r.master_port, rounds[0].master_port);
    EXPECT_NE(r.master_port, 0);
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
}

TEST(NodeRendezvous, NodeRankHintsDecideRanks) {
  NodeRdzvConfig c = config(3, 3);
  const int hints[] = {2, 0, 1};
  Agents list;
  for (int k = 0; k < 3; ++k) {
    c.node_rank = hints[k];
    list.push_back(agent(c, k, k == 0 ? 0 : list[0]->store_port()));
  }
  std::vector<Round> rounds = join_all(list);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(rounds[k].node_rank, hints[k]);
    EXPECT_EQ(rounds[k].master_addr, "10.9.0.2");  // agent 1 asked for rank 0
  }
}

// Both nodes of a job whose hints are `hints` must fail to join with an Error holding `want`.
void expect_hints_rejected(NodeRdzvConfig c, std::vector<int> hints,
                           const std::vector<std::string>& want) {
  Agents list;
  for (int k = 0; k < 2; ++k) {
    c.node_rank = hints[k];
    list.push_back(agent(c, k, k == 0 ? 0 : list[0]->store_port()));
  }
  std::vector<std::future<Round>> futures;
  for (auto& a : list)
    futures.push_back(std::async(std::launch::async, [&a] { return a->join(); }));
  for (auto& f : futures) {
    try {
      f.get();
      ADD_FAILURE() << "joined despite bad hints";
    } catch (const Error& e) {
      for (const std::string& text : want) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    }
  }
}

TEST(NodeRendezvous, BadHintsAreAnErrorOnEveryNode) {
  expect_hints_rejected(config(2, 2), {1, 1},
                        {"node0 (10.9.0.1)", "node1 (10.9.0.2)", ") asked for node rank 1"});
  NodeRdzvConfig c = config(2, 3);  // rank 2 is allowed, but only two nodes come
  c.run_id = "elastic";
  expect_hints_rejected(c, {0, 2}, {"node1 (10.9.0.2) asked for node rank 2"});
}

TEST(NodeRendezvous, ElasticRoundClosesAtMaxOrAfterLastCall) {
  NodeRdzvConfig c = config(2, 3);
  c.last_call_timeout = 5s;  // the third node arrives well within it
  Agents list = agents(c, 3);
  auto start = Clock::now();
  auto first_two = std::async(std::launch::async, [&] {
    return join_some({list[0].get(), list[1].get()});
  });
  std::this_thread::sleep_for(100ms);
  Round third = list[2]->join();
  std::vector<Round> rounds = first_two.get();
  EXPECT_LT(ms_since(start), 3000) << "the round must close as soon as MAX arrived";
  EXPECT_EQ(third.num_nodes, 3);
  for (const Round& r : rounds) EXPECT_EQ(r.num_nodes, 3);

  NodeRdzvConfig d = config(2, 3);
  d.run_id = "two";
  d.last_call_timeout = 300ms;
  Agents pair = agents(d, 2);
  start = Clock::now();
  rounds = join_all(pair);
  EXPECT_GE(ms_since(start), 290) << "MIN nodes wait out the last call";
  for (const Round& r : rounds) EXPECT_EQ(r.num_nodes, 2);
}

TEST(NodeRendezvous, LateNodeTriggersMembershipChange) {
  Agents list = agents(config(2, 3), 3);
  std::vector<Round> first = join_some({list[0].get(), list[1].get()});
  ASSERT_EQ(first[0].num_nodes, 2);
  EXPECT_EQ(list[0]->check(), std::nullopt);
  auto late = std::async(std::launch::async, [&] { return list[2]->join(); });
  for (int k = 0; k < 2; ++k) {
    std::optional<Outcome> o;
    auto start = Clock::now();
    while (!(o = list[k]->check()) && ms_since(start) < 5000) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(o, Outcome::kMembershipChange);
  }
  std::vector<Round> second = join_some({list[0].get(), list[1].get()});
  second.push_back(late.get());
  for (const Round& r : second) {
    EXPECT_EQ(r.round, 1);
    EXPECT_EQ(r.num_nodes, 3);
    EXPECT_EQ(r.restart_count, 0) << "membership changes are free";
  }
}

TEST(NodeRendezvous, LateNodeWaitsWhenTheJobIsFull) {
  NodeRdzvConfig c = config(2, 2);
  Agents list = agents(c, 2);
  join_all(list);
  c.join_timeout = 300ms;
  auto late = agent(c, 2, list[0]->store_port());
  expect_throw_with<TimeoutError>([&] { late->join(); }, "maximum of 2 nodes");
  EXPECT_EQ(list[0]->check(), std::nullopt) << "a latecomer must not disturb a full job";
}

TEST(NodeRendezvous, FailureRestartsEveryNode) {
  NodeRdzvConfig c = config(2, 2);
  c.max_restarts = 1;
  Agents list = agents(c, 2);
  join_all(list);
  EXPECT_EQ(list[1]->report_failure({"rank 3 exited with 1"}), Outcome::kRestart);
  EXPECT_EQ(list[0]->check(), Outcome::kRestart);
  for (const Round& r : join_all(list)) {
    EXPECT_EQ(r.round, 1);
    EXPECT_EQ(r.restart_count, 1);
    EXPECT_EQ(r.num_nodes, 2);
    EXPECT_EQ(r.worker_prefix, "tdistrun/job/r/1/w/");
  }
  EXPECT_EQ(list[0]->failure_records(), (std::vector<std::string>{"rank 3 exited with 1"}));
}

TEST(NodeRendezvous, RestartBudgetIsTheJobs) {
  NodeRdzvConfig c = config(2, 2);
  c.max_restarts = 1;
  Agents list = agents(c, 2);
  join_all(list);
  EXPECT_EQ(list[0]->report_failure({"first\nwith two lines"}), Outcome::kRestart);
  EXPECT_EQ(list[1]->check(), Outcome::kRestart);
  join_all(list);
  EXPECT_EQ(list[1]->report_failure({"second", ""}), Outcome::kGiveUp);
  EXPECT_EQ(list[0]->check(), Outcome::kGiveUp);
  EXPECT_EQ(list[0]->failure_records(),
            (std::vector<std::string>{"first\nwith two lines", "second", ""}));
  expect_throw_with<Error>([&] { list[1]->join(); }, "already finished");
}

TEST(NodeRendezvous, FailuresInOneRoundConsumeOneRestart) {
  NodeRdzvConfig c = config(2, 2);
  c.max_restarts = 2;
  Agents list = agents(c, 2);
  for (int round = 0; round < 3; ++round) {
    std::vector<Round> rounds = join_all(list);
    EXPECT_EQ(rounds[0].restart_count, round);
    EXPECT_EQ(rounds[1].restart_count, round);
    Outcome want = round < 2 ? Outcome::kRestart : Outcome::kGiveUp;
    EXPECT_EQ(list[0]->report_failure({"a"}), want);
    EXPECT_EQ(list[1]->report_failure({"b"}), want);
  }
  EXPECT_EQ(list[1]->failure_records().size(), 6u);
}

TEST(NodeRendezvous, LostHeartbeatIsANodeFailure) {
  NodeRdzvConfig c = config(3, 3);
  c.heartbeat_timeout = 500ms;
  c.max_restarts = 1;
  Agents list = agents(c, 3);
  std::vector<Round> rounds = join_all(list);
  auto start = Clock::now();
  std::vector<std::future<std::optional<Outcome>>> monitors;
  for (int k = 0; k < 2; ++k) {  // agent 2 stops calling check()
    monitors.push_back(std::async(std::launch::async, [&, k] {
      std::optional<Outcome> o;
      while (!(o = list[k]->check()) && ms_since(start) < 5000) std::this_thread::sleep_for(50ms);
      return o;
    }));
  }
  for (auto& m : monitors) EXPECT_EQ(m.get(), Outcome::kRestart);
  double took = ms_since(start);
  EXPECT_GE(took, 450);
  EXPECT_LT(took, 2000);
  std::vector<std::string> records = list[0]->failure_records();
  ASSERT_EQ(records.size(), 1u) << "one report per lost node";
  EXPECT_NE(records[0].find("node" + std::to_string(2) + ", 10.9.0.3"), std::string::npos)
      << records[0];
  EXPECT_NE(records[0].find("node " + std::to_string(rounds[2].node_rank)), std::string::npos);
  EXPECT_EQ(list[2]->check(), Outcome::kRestart) << "the stalled node learns it too";
}

TEST(NodeRendezvous, LeaveEndsTheRoundAtOnce) {
  NodeRdzvConfig c = config(2, 2);
  Agents list = agents(c, 2);  // no restarts left: leaving gives up
  join_all(list);
  list[1]->leave();
  EXPECT_EQ(list[0]->check(), Outcome::kGiveUp);
  std::vector<std::string> records = list[0]->failure_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_NE(records[0].find("left the job"), std::string::npos) << records[0];
}

TEST(NodeRendezvous, JoinTimesOutWithoutMinNodes) {
  NodeRdzvConfig c = config(2, 2);
  c.join_timeout = 300ms;
  Agents list = agents(c, 1);
  auto start = Clock::now();
  expect_throw_with<TimeoutError>(
      [&] { list[0]->join(); },
      "rendezvous 'job' at 127.0.0.1:" + std::to_string(list[0]->store_port()) +
          ": only 1 of 2 nodes joined within 0.3 s; check that every node runs tdistrun with "
          "the same --rdzv-endpoint and --rdzv-id");
  EXPECT_LT(ms_since(start), 2000);
}

TEST(NodeRendezvous, NodeThatTimedOutIsNeverAMember) {
  NodeRdzvConfig c = config(2, 2);
  c.join_timeout = 300ms;
  Agents list = agents(c, 1);
  EXPECT_THROW(list[0]->join(), TimeoutError);
  c.join_timeout = 10s;
  list.push_back(agent(c, 1, list[0]->store_port()));
  list.push_back(agent(c, 2, list[0]->store_port()));
  std::vector<Round> rounds = join_some({list[1].get(), list[2].get()});
  for (const Round& r : rounds) {
    EXPECT_EQ(r.round, 1) << "round 0 was voided";
    ASSERT_EQ(r.num_nodes, 2);
    for (const NodeInfo& n : r.nodes) EXPECT_NE(n.hostname, "node0");
  }
}

TEST(NodeRendezvous, ExitBarrierWaitsForEveryNode) {
  NodeRdzvConfig c = config(2, 2);
  c.heartbeat_timeout = 500ms;
  Agents list = agents(c, 2);
  join_all(list);
  auto host_done = std::async(std::launch::async, [&] { return list[0]->finish(); });
  // Longer than the heartbeat timeout: the waiting host must keep heartbeating.
  auto start = Clock::now();
  while (ms_since(start) < 700) {
    ASSERT_EQ(list[1]->check(), std::nullopt);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(host_done.wait_for(0ms), std::future_status::timeout);
  EXPECT_EQ(list[1]->finish(), Outcome::kDone);  // the host still serves
  EXPECT_EQ(host_done.get(), Outcome::kDone);
  start = Clock::now();
  list[0].reset();  // every node acknowledged: the host stops at once
  EXPECT_LT(ms_since(start), 400);
}

TEST(NodeRendezvous, ExitBarrierEndsOnAFailureElsewhere) {
  NodeRdzvConfig c = config(2, 2);
  c.max_restarts = 3;
  Agents list = agents(c, 2);
  join_all(list);
  auto done = std::async(std::launch::async, [&] { return list[0]->finish(); });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(list[1]->report_failure({"x"}), Outcome::kRestart);
  EXPECT_EQ(done.get(), Outcome::kRestart);
  EXPECT_EQ(join_all(list)[0].restart_count, 1);
}

TEST(NodeRendezvous, HostingFollowsThePort) {
  Agents list = agents(config(1, 2), 1);
  NodeRdzvConfig c = config(1, 2);
  c.port = list[0]->store_port();
  c.hostname = "second";
  NodeRendezvous second(c);  // is_host unset and the port taken: another agent hosts
  EXPECT_FALSE(second.is_host());
  EXPECT_EQ(second.join().nodes[0].hostname, "second");
  c.is_host = true;
  expect_throw_with<Error>([&] { NodeRendezvous third(c); },
                           "port " + std::to_string(c.port) + " on 127.0.0.1 is in use");
  // A one-node job has no other agent to join: a taken port is someone else's.
  c.is_host.reset();
  c.max_nodes = 1;
  expect_throw_with<Error>([&] { NodeRendezvous fourth(c); },
                           "port " + std::to_string(c.port) + " on 127.0.0.1 is in use");
}

TEST(NodeRendezvous, ForeignServerAtTheEndpointIsRefused) {
  net::Listener foreign = net::listen_tcp("127.0.0.1", 0);  // accepts, never answers
  NodeRdzvConfig c = config(1, 2);
  c.port = foreign.port();
  c.is_host = false;
  c.join_timeout = 1s;
  const auto start = std::chrono::steady_clock::now();
  expect_throw_with<Error>([&] { NodeRendezvous agent(c); }, "does not answer as a tdist store");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace tdist::launcher
