// tdistrun's --rdzv-backend etcd-v2 against a real etcd on free loopback ports
// (tests/support/etcd_server.h; the binary fails, not skips, without etcd). NodeRendezvous
// over etcd as threads of this process: two agents meet, and when the first one's node goes
// the other carries on (a restart, then a round of its own), where over c10d the store's
// loss ends it with a message naming etcd-v2. Then the real launcher, two "nodes" on
// loopback: a job whose workers rendezvous through etcd (TDIST_AGENT_STORE=etcd://), its
// start-up time against c10d's (printed), and the first agent SIGKILLed with its workers.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "launcher/tdistrun_test_util.h"
#include "net/socket.h"
#include "support/etcd_server.h"
#include "tdist/error.h"
#include "tdistrun/node_rdzv.h"

namespace tdist::tdistrun_test {
namespace {

using launcher::NodeRdzvConfig;
using launcher::NodeRendezvous;
using launcher::Outcome;
using launcher::Round;
using test_support::EtcdServer;

inline const std::string kInitBarrierWorker = kBinDir + "/launcher_init_barrier_worker";

NodeRdzvConfig etcd_config(const EtcdServer& etcd, int min_nodes, int max_nodes, int k) {
  NodeRdzvConfig c;
  c.etcd = true;
  c.host = etcd.host();
  c.port = etcd.port();
  c.run_id = "job";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.join_timeout = 10s;
  c.last_call_timeout = 200ms;
  c.heartbeat_timeout = 700ms;
  c.max_restarts = 1;
  c.hostname = "node" + std::to_string(k);
  c.node_addr = "10.9.0." + std::to_string(k + 1);
  return c;
}

// Calls check() every 50 ms until it says the round ended, for at most `limit`.
std::optional<Outcome> watch(NodeRendezvous& agent, Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  std::optional<Outcome> outcome;
  while (!(outcome = agent.check()) && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  return outcome;
}

TEST(EtcdNodeRendezvous, TwoNodesMeetAndNobodyHosts) {
  EtcdServer etcd;
  etcd.start();
  NodeRendezvous a(etcd_config(etcd, 2, 2, 0));
  NodeRendezvous b(etcd_config(etcd, 2, 2, 1));
  EXPECT_FALSE(a.is_host());
  EXPECT_EQ(a.worker_store(), "etcd://" + etcd.endpoint());
  auto joined = std::async(std::launch::async, [&] { return a.join(); });
  const Round rb = b.join();
  const Round ra = joined.get();
  EXPECT_EQ(ra.num_nodes, 2);
  EXPECT_EQ(ra.node_rank + rb.node_rank, 1);
  EXPECT_EQ(ra.worker_prefix, "/tdist/job/tdistrun/job/r/0/w/");
  auto finished = std::async(std::launch::async, [&] { return a.finish(); });
  EXPECT_EQ(b.finish(), Outcome::kDone);
  EXPECT_EQ(finished.get(), Outcome::kDone);
}

TEST(EtcdNodeRendezvous, LosingTheFirstNodeCostsARestartNotTheJob) {
  EtcdServer etcd;
  etcd.start();
  auto first = std::make_unique<NodeRendezvous>(etcd_config(etcd, 1, 2, 0));
  NodeRendezvous second(etcd_config(etcd, 1, 2, 1));
  auto joined = std::async(std::launch::async, [&] { return first->join(); });
  std::this_thread::sleep_for(50ms);  // the first arrives first
  EXPECT_EQ(second.join().num_nodes, 2);
  EXPECT_EQ(joined.get().node_rank, 0);
  first.reset();  // node 0 is gone: no more heartbeats, nothing it hosted
  EXPECT_EQ(watch(second, 5s), Outcome::kRestart);
  const Round alone = second.join();
  EXPECT_EQ(alone.round, 1);
  EXPECT_EQ(alone.restart_count, 1);
  EXPECT_EQ(alone.num_nodes, 1);
  EXPECT_EQ(second.finish(), Outcome::kDone);
}

TEST(EtcdNodeRendezvous, LostC10dHostSaysSoAndNamesEtcd) {
  NodeRdzvConfig c;
  c.host = "127.0.0.1";
  c.run_id = "job";
  c.min_nodes = c.max_nodes = 2;
  c.join_timeout = 10s;
  c.heartbeat_timeout = 5s;
  c.is_host = true;
  auto host = std::make_unique<NodeRendezvous>(c);
  c.is_host = false;
  c.port = host->store_port();
  NodeRendezvous other(c);
  auto joined = std::async(std::launch::async, [&] { return host->join(); });
  other.join();
  joined.get();
  host.reset();  // its TCPStore server goes with it
  try {
    watch(other, 5s);
    ADD_FAILURE() << "no PeerError";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rendezvous store at 127.0.0.1:" + std::to_string(c.port) + " was lost"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("--rdzv-backend etcd-v2"), std::string::npos) << what;
  }
}

// --- the real launcher, two nodes on loopback ---------------------------------------------

class EtcdTdistrunTest : public TdistrunTest {
 protected:
  void TearDown() override {
    etcd_.stop();  // before the fixture reaps every child
    TdistrunTest::TearDown();
  }

  // Two agents of one job, the second started `stagger` after the first.
  std::vector<std::unique_ptr<Process>> start_nodes(const std::vector<std::string>& rdzv,
                                                    const std::vector<std::string>& rest,
                                                    const std::vector<std::string>& extra_env,
                                                    Clock::duration stagger = 0ms) {
    std::vector<std::unique_ptr<Process>> nodes;
    for (int k = 0; k < 2; ++k) {
      std::vector<std::string> args = rdzv;
      args.insert(args.end(), rest.begin(), rest.end());
      nodes.push_back(std::make_unique<Process>(dir_, tdistrun(args), env(extra_env)));
      if (k == 0) std::this_thread::sleep_for(stagger);
    }
    return nodes;
  }

  std::vector<std::string> etcd_flags(const std::string& nnodes) {
    return {"--nnodes",        nnodes,           "--rdzv-backend", "etcd-v2",
            "--rdzv-endpoint", etcd_.endpoint(), "--rdzv-id",      "e2e"};
  }

  EtcdServer etcd_;
};

TEST_F(EtcdTdistrunTest, TwoNodeJobMeetsOnEtcdAndItsStartIsTimed) {
  etcd_.start();
  const std::vector<std::string> job = {"--nproc-per-node", "2", kInitBarrierWorker, "--print"};
  auto run_both = [&](const std::vector<std::string>& rdzv) {
    const auto start = Clock::now();
    auto nodes = start_nodes(rdzv, job, {});
    for (auto& node : nodes) {
      EXPECT_EQ(node->wait(kJobLimit), 0) << node->err();
    }
    const std::string all = nodes[0]->out() + nodes[1]->out();
    EXPECT_NE(all.find("4 ranks joined"), std::string::npos) << all << nodes[0]->err();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  const double on_etcd = run_both(etcd_flags("2"));
  const uint16_t port = net::listen_tcp("127.0.0.1", 0).port();
  const double on_c10d = run_both({"--nnodes", "2", "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port), "--rdzv-id", "c10d"});
  std::printf(
      "2-node job of 4 ranks (init + barrier), start to end: etcd-v2 %.0f ms, c10d %.0f ms\n",
      on_etcd, on_c10d);
}

TEST_F(EtcdTdistrunTest, FirstNodeSigkilledTheOtherRestartsAloneAndFinishes) {
  etcd_.start();
  const fs::path pids = dir_ / "pids";
  fs::create_directory(pids);
  // Round 0: the workers sleep (until the restart stops them); round 1: they join and end.
  auto nodes = start_nodes(
      etcd_flags("1:2"),
      {"--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-conf", "last_call_timeout=1",
       kFlakyWorker, "--fail-attempts", "1", "--sleep-ms", "60000"},
      {"FLAKY_PID_DIR=" + pids.string(), "TDIST_AGENT_HEARTBEAT_TIMEOUT=2"}, 300ms);
  ASSERT_EQ(wait_for_pids(pids, 4).size(), 4u) << nodes[0]->err() << nodes[1]->err();
  ::kill(nodes[0]->pid(), SIGKILL);  // its workers follow (PDEATHSIG)
  EXPECT_EQ(nodes[0]->wait(5s), 128 + SIGKILL);
  EXPECT_EQ(nodes[1]->wait(30s), 0) << nodes[1]->err();
  const std::string err = nodes[1]->err();
  EXPECT_EQ(err.find("was lost"), std::string::npos) << err;
  EXPECT_NE(err.find("restarting"), std::string::npos) << err;
}

// tdistrun --elastic on etcd: the first node dies with its workers, and nothing of the job
// lived there, so the other node's workers go on as a group of 2 (ElasticGroup) and finish.
TEST_F(EtcdTdistrunTest, ElasticFirstNodeSigkilledTheOtherNodesWorkersGoOnAsTwo) {
  etcd_.start();
  const fs::path pids = dir_ / "pids";
  fs::create_directory(pids);
  auto nodes = start_nodes(etcd_flags("2"),
                           {"--nproc-per-node", "2", "--elastic",
                            kBinDir + "/launcher_elastic_worker", "150", "40", "auto"},
                           {"ELASTIC_PID_DIR=" + pids.string(), "TDIST_AGENT_HEARTBEAT_TIMEOUT=2",
                            "TDIST_ELASTIC_JOIN_WINDOW=30"},
                           300ms);
  ASSERT_EQ(wait_for_pids(pids, 4).size(), 4u) << nodes[0]->err() << nodes[1]->err();
  std::this_thread::sleep_for(500ms);  // some steps together
  ::kill(nodes[0]->pid(), SIGKILL);    // its workers follow (PDEATHSIG)
  EXPECT_EQ(nodes[0]->wait(5s), 128 + SIGKILL);
  EXPECT_EQ(nodes[1]->wait(40s), 0) << nodes[1]->err();
  EXPECT_NE(nodes[1]->out().find("elastic_worker: steps 150 world 2 generation 1"),
            std::string::npos)
      << nodes[1]->out() << nodes[1]->err();
  EXPECT_NE(nodes[1]->err().find("the job goes on without ranks"), std::string::npos)
      << nodes[1]->err();
}

TEST_F(EtcdTdistrunTest, FirstNodeSigkilledUnderC10dEndsTheOtherWithACleanMessage) {
  const uint16_t port = net::listen_tcp("127.0.0.1", 0).port();
  const fs::path pids = dir_ / "pids";
  fs::create_directory(pids);
  auto nodes = start_nodes(
      {"--nnodes", "1:2", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id",
       "c10d"},
      {"--nproc-per-node", "1", "--max-restarts", "1", "--rdzv-conf", "last_call_timeout=1",
       kFlakyWorker, "--fail-attempts", "1", "--sleep-ms", "60000"},
      {"FLAKY_PID_DIR=" + pids.string(), "TDIST_AGENT_HEARTBEAT_TIMEOUT=2"}, 300ms);
  ASSERT_EQ(wait_for_pids(pids, 2).size(), 2u) << nodes[0]->err() << nodes[1]->err();
  ::kill(nodes[0]->pid(), SIGKILL);
  EXPECT_EQ(nodes[1]->wait(30s), 1) << nodes[1]->err();
  const std::string err = nodes[1]->err();
  EXPECT_NE(err.find("rendezvous store at 127.0.0.1:" + std::to_string(port) + " was lost"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("--rdzv-backend etcd-v2"), std::string::npos) << err;
  std::printf("the other agent said: %s", err.c_str());
}

}  // namespace
}  // namespace tdist::tdistrun_test
