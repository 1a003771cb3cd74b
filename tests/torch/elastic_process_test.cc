// Elastic jobs for real: examples/train_elastic (4 ranks of DDP) under tdistrun --elastic,
// with workers SIGKILLed in the middle of a step. With a replacement, the final parameters
// equal bit for bit those of the same job without a failure (tcp, shm, auto; twice in a row,
// rank 0 too; after a vote completed; while the state is being sent; by a waiting spare);
// without a restart left the job shrinks to 3 and finishes; a rank frozen (SIGSTOP) past the
// timeout is left out and, woken up, refused; a replacement with another model is refused
// and the job goes on; a store that rank 0 hosts is refused. Every job is killed past its
// own limit.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "torch_test_paths.h"

namespace tdist::torch::elastic_process_test {
namespace {

using test_support::run_command;
using test_support::TempDir;

// A small model: the scenarios are about the protocol, not the speed.
const std::string kJob = std::string(TDIST_TRAIN_ELASTIC_BIN) + " --width 256 --steps 16";

struct Outcome {
  int rc = -1;
  std::string out;
  std::set<std::string> hashes;  // the final parameters of every rank that finished
  int world = 0, generation = -1, reports = 0;
};

// tdistrun --elastic with 4 workers; `env` before it, `around` a shell wrapper ("%s" = the
// command).
Outcome run_job(const std::string& backend, const std::string& flags, int max_restarts,
                const std::string& env = "", const std::string& around = "%s",
                const std::string& launcher_flags = "") {
  TempDir dir;
  const std::string job = "OMP_NUM_THREADS=1 " + env + " timeout -s KILL 90 " + TDIST_TDISTRUN_BIN +
                          " --standalone --nproc-per-node 4 --elastic " + launcher_flags +
                          " --max-restarts " + std::to_string(max_restarts) + " " + kJob +
                          " --backend " + backend + " --out " + dir.path() + "/r --marks " +
                          dir.path() + " " + flags;
  std::string command = around;
  command.replace(command.find("%s"), 2, job);
  Outcome o;
  o.rc = run_command("cd " + dir.path() + " && { " + command + "; }", &o.out);
  for (int slot = 0; slot < 4; ++slot) {
    std::ifstream in(dir.path() + "/r." + std::to_string(slot));
    std::string word, hash;
    if (!(in >> word >> hash)) continue;
    int64_t step = 0;
    std::string w1, w2, w3;
    in >> w1 >> step >> w2 >> o.world >> w3 >> o.generation;
    o.hashes.insert(hash);
    ++o.reports;
    EXPECT_EQ(step, 16) << "slot " << slot;
  }
  return o;
}

// The same job without a failure, once per backend.
const std::string& reference(const std::string& backend) {
  static std::map<std::string, std::string> hashes;
  auto it = hashes.find(backend);
  if (it == hashes.end()) {
    Outcome o = run_job(backend, "", 0);
    EXPECT_EQ(o.rc, 0) << o.out;
    EXPECT_EQ(o.hashes.size(), 1u) << o.out;
    it = hashes.emplace(backend, o.hashes.empty() ? "none" : *o.hashes.begin()).first;
  }
  return it->second;
}

void expect_replaced(const Outcome& o, const std::string& backend, int generation) {
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_EQ(o.reports, 4) << o.out;
  EXPECT_EQ(o.world, 4) << o.out;
  EXPECT_EQ(o.generation, generation) << o.out;
  ASSERT_EQ(o.hashes.size(), 1u) << "the ranks' parameters differ\n" << o.out;
  EXPECT_EQ(*o.hashes.begin(), reference(backend))
      << "the parameters differ from the job's without a failure\n"
      << o.out;
}

class ElasticReplace : public ::testing::TestWithParam<std::string> {};

TEST_P(ElasticReplace, AKilledRankIsReplacedAndNoStepIsLostOrDoubled) {
  expect_replaced(run_job(GetParam(), "--die 2@6", 2), GetParam(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, ElasticReplace, ::testing::Values("tcp", "shm", "auto"));

TEST(ElasticFaults, TwoKillsInARowRankZeroFirst) {
  expect_replaced(run_job("auto", "--die 0@4 --die 3@9", 3), "auto", 2);
}

TEST(ElasticFaults, AWaitingSpareTakesTheDeadRanksPlace) {
  const Outcome o = run_job("auto", "--die 1@5 --die 3@9", 2, "", "%s", "--elastic-spares 1");
  expect_replaced(o, "auto", 2);
  EXPECT_NE(o.out.find("spare 0.0 takes rank 1 (restart 1 of 2)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("spare 0.1 takes rank 3 (restart 2 of 2)"), std::string::npos) << o.out;
}

TEST(ElasticFaults, AKillAfterTheVoteRollsTheReplacementForward) {
  expect_replaced(run_job("auto", "--die 1@6:after-vote", 2), "auto", 1);
}

TEST(ElasticFaults, TheSenderDiesDuringTheStateTransfer) {
  const Outcome o = run_job("auto", "--die 2@5 --die 0@5:in-recover", 3);
  EXPECT_EQ(o.rc, 0) << o.out;
  ASSERT_EQ(o.hashes.size(), 1u) << o.out;
  EXPECT_EQ(*o.hashes.begin(), reference("auto")) << o.out;
  EXPECT_GE(o.generation, 2) << o.out;
}

TEST(ElasticFaults, WithoutARestartLeftTheJobShrinks) {
  const Outcome o = run_job("tcp", "--die 3@6", 0);
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_EQ(o.reports, 3) << o.out;
  EXPECT_EQ(o.world, 3) << o.out;
  EXPECT_EQ(o.generation, 1) << o.out;
  EXPECT_EQ(o.hashes.size(), 1u) << o.out;
  EXPECT_NE(o.out.find("no restarts left: the job goes on without rank 3"), std::string::npos)
      << o.out;
}

TEST(ElasticFaults, AFrozenRankIsLeftOutAndRefusedWhenItWakesUp) {
  // Frozen in step 5; the others time out (3 s), wait out the join window (1 s) and go on
  // with 3; woken 9 s later, it is refused and exits; the job still succeeds.
  const Outcome o =
      run_job("auto", "--freeze 2@5 --join-window 1", 0, "TDIST_TIMEOUT=3",
              "( sleep 9; kill -CONT $(cut -d' ' -f4 died-0) ) & %s; rc=$?; wait; exit $rc");
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_EQ(o.reports, 3) << o.out;
  EXPECT_EQ(o.world, 3) << o.out;
  EXPECT_NE(o.out.find("slot 2 (rank of generation 0) arrived after generation 1 closed without "
                       "it"),
            std::string::npos)
      << o.out;
}

TEST(ElasticFaults, AReplacementWithAnotherModelIsRefusedAndTheJobGoesOn) {
  const Outcome o = run_job("auto", "--die 2@5 --newcomer-width 128", 1);
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_EQ(o.world, 3) << o.out;
  EXPECT_NE(o.out.find("elastic::recover (generation 1): slot 2 (rank 2) cannot take the state "
                       "of rank 0"),
            std::string::npos)
      << o.out;
}

TEST(ElasticFaults, AStoreThatRankZeroHostsIsRefused) {
  std::string out;
  const int rc = run_command(
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=1 RANK=0 WORLD_SIZE=1 timeout -s KILL 30 " + kJob, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("so its death would end the job; run under tdistrun"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace tdist::torch::elastic_process_test
