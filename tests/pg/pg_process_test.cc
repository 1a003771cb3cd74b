// Real processes: this test hosts a TCPStoreServer on port 0 and starts 4 pg_worker
// processes (env://, TDIST_USE_AGENT_STORE=1, the backend under test: test_backend()).
//  - Collectives: every collective once across processes, checked by the workers.
//  - A rank SIGKILLs itself during a loop of 64 MiB all_reduces (group timeout 10 min):
//    the survivors get PeerError within 5 s of the kill, and a later all_reduce fails at
//    once with PeerError.
//  - A rank calls abort() while the others wait in all_reduce: they get PeerError fast.
// Every run has a deadline: workers still running at it are SIGKILLed and reaped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"
#include "support/spawn.h"
#include "support/temp_dir.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

constexpr int kWorld = 4;

// Variables of this process that would confuse a worker's rendezvous.
bool is_managed(const std::string& name) {
  for (const char* prefix : {"MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_", "TDIST_",
                             "TORCHELASTIC_", "OMPI_", "PMI_", "SLURM_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

using test_support::TempDir;

// Starts one worker; argv and envp are built before fork (the child only execs).
pid_t spawn(const std::string& mode, const std::string& dir, int rank, uint16_t port) {
  std::vector<std::string> args = {TDIST_PG_WORKER, mode, dir, tdist::pg_test::test_backend()};
  std::vector<std::string> envs = test_support::environment_without(is_managed);
  envs.push_back("MASTER_ADDR=127.0.0.1");
  envs.push_back("MASTER_PORT=" + std::to_string(port));
  envs.push_back("RANK=" + std::to_string(rank));
  envs.push_back("WORLD_SIZE=" + std::to_string(kWorld));
  envs.push_back("TDIST_USE_AGENT_STORE=1");
  return test_support::spawn_exec(std::move(args), std::move(envs));
}

struct Outcome {
  int exit_code = -1;  // -1: still running at the deadline (then killed)
  int signal = 0;      // the signal that ended it, if any
};

// Runs kWorld workers of `mode` until all ended or `limit` passed; kills leftovers.
std::vector<Outcome> run_workers(const std::string& mode, const std::string& dir,
                                 std::chrono::seconds limit) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pid_t pid = spawn(mode, dir, r, server->port());
    EXPECT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  std::vector<Outcome> out(pids.size());
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (!done[i] && pids[i] > 0 && ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        if (WIFEXITED(status)) out[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) {
          out[i].signal = WTERMSIG(status);
          out[i].exit_code = 128 + out[i].signal;
        }
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!done[i] && pids[i] > 0) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
      ADD_FAILURE() << "rank " << i << " (" << mode << ") was still running after " << limit.count()
                    << " s and was killed";
    }
  }
  return out;
}

// What a surviving rank wrote: the error types and times (pg_worker's record_failure).
struct Report {
  bool found = false;
  std::string error;
  int64_t error_ns = 0;  // from the event (kill or abort) to the error
  std::string later_error;
  int64_t later_ns = 0;  // how long the later all_reduce took to fail
};

Report read_report(const std::string& dir, int rank) {
  Report r;
  std::ifstream in(dir + "/rank" + std::to_string(rank));
  r.found = static_cast<bool>(in >> r.error >> r.error_ns >> r.later_error >> r.later_ns);
  return r;
}

void expect_fast_peer_errors(const std::string& dir, const std::vector<int>& ranks) {
  for (int rank : ranks) {
    Report r = read_report(dir, rank);
    ASSERT_TRUE(r.found) << "rank " << rank << " wrote no report";
    EXPECT_EQ(r.error, "PeerError") << "rank " << rank;
    EXPECT_GE(r.error_ns, 0) << "rank " << rank;
    EXPECT_LE(r.error_ns, int64_t{5'000'000'000})
        << "rank " << rank << " saw the failure " << r.error_ns / 1000000 << " ms after it";
    EXPECT_EQ(r.later_error, "PeerError") << "rank " << rank << ": the later all_reduce";
    EXPECT_LE(r.later_ns, int64_t{1'000'000'000})
        << "rank " << rank << ": the later all_reduce took " << r.later_ns / 1000000 << " ms";
    std::cout << "rank " << rank << ": " << r.error << " " << r.error_ns / 1000000
              << " ms after the event; later op: " << r.later_error << " after "
              << r.later_ns / 1000 << " us\n";
  }
}

TEST(ProcessGroupProcessTest, EveryCollectiveAcrossFourProcesses) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::vector<Outcome> out = run_workers("collectives", dir.path(), std::chrono::seconds(40));
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(out[static_cast<size_t>(r)].exit_code, 0) << r;
}

TEST(ProcessGroupProcessTest, SigkilledRankFailsTheOthersWithPeerErrorWithinFiveSeconds) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::vector<Outcome> out = run_workers("kill", dir.path(), std::chrono::seconds(60));
  EXPECT_EQ(out[2].signal, SIGKILL) << "rank 2 should have killed itself";
  for (int r : {0, 1, 3}) EXPECT_EQ(out[static_cast<size_t>(r)].exit_code, 0) << r;
  expect_fast_peer_errors(dir.path(), {0, 1, 3});
}

TEST(ProcessGroupProcessTest, AbortOnOneRankFailsTheOthersWithPeerError) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::vector<Outcome> out = run_workers("abort", dir.path(), std::chrono::seconds(40));
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(out[static_cast<size_t>(r)].exit_code, 0) << r;
  expect_fast_peer_errors(dir.path(), {0, 1, 2, 3});
}

}  // namespace
}  // namespace tdist
