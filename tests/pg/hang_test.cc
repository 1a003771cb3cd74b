// Jobs that go wrong, as real processes (3 hang_worker ranks over env://, the store hosted
// here on port 0, the backend under test): for each, the error every rank gets, the
// warning a waiting rank logs (TDIST_WAIT_WARNING=1), what tdist-status prints while the job
// hangs, and what tools/tdist_flight.py makes of the flight records must name the right
// rank, operation and sequence number.
//  - skip: rank 2 skips an all_reduce; ranks 0 and 1 wait in all_reduce #2 until timeout.
//  - mismatch: rank 1 calls broadcast where the others call all_reduce.
//  - sleep: rank 1 computes for a while before its second all_reduce.
//  - kill: rank 1 is SIGKILLed.
// And a job started by tdistrun, which makes the job's token: tdist-status finds the job and
// the token through tdistrun's job record, with no arguments.
// Every run has a deadline: workers still running at it are SIGKILLed and reaped.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"
#include "support/run_command.h"
#include "support/spawn.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

constexpr int kWorld = 3;
using std::chrono::milliseconds;
using std::chrono::seconds;

bool is_managed(const std::string& name) {
  for (const char* prefix : {"MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_", "TDIST_",
                             "TORCHELASTIC_", "OMPI_", "PMI_", "SLURM_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using test_support::run_command;

class Job {
 public:
  Job(const std::string& mode, milliseconds timeout)
      : server_(TCPStoreServer::start("127.0.0.1", 0)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tdist_hang_XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
    for (int r = 0; r < kWorld; ++r) {
      std::vector<std::string> args = {TDIST_HANG_WORKER, mode, dir_, pg_test::test_backend(),
                                       std::to_string(timeout.count())};
      std::vector<std::string> envs = test_support::environment_without(is_managed);
      envs.push_back("MASTER_ADDR=127.0.0.1");
      envs.push_back("MASTER_PORT=" + std::to_string(server_->port()));
      envs.push_back("RANK=" + std::to_string(r));
      envs.push_back("WORLD_SIZE=" + std::to_string(kWorld));
      envs.push_back("TDIST_USE_AGENT_STORE=1");
      envs.push_back("TDIST_WAIT_WARNING=1");
      envs.push_back("TDIST_FLIGHT_RECORDER_FILE=" + dir_ + "/flight_");
      pids_.push_back(test_support::spawn_exec(std::move(args), std::move(envs)));
    }
  }
  ~Job() {
    release();
    finish(seconds(1));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string file(const std::string& name) const { return read(path(name)); }
  // Every rank's stderr (a sanitizer's report of a worker lands there), for a failure.
  std::string logs() const {
    std::string all;
    for (int r = 0; r < kWorld; ++r) {
      all += "--- log" + std::to_string(r) + ":\n" + file("log" + std::to_string(r));
    }
    return all;
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }

  // Waits until every named file exists.
  bool wait_for(const std::vector<std::string>& names, seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (const auto& n : names) all = all && std::filesystem::exists(path(n));
      if (all) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }
  // Waits until the log of `rank` contains `part`.
  bool wait_for_log(int rank, const std::string& part, seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (contains(file("log" + std::to_string(rank)), part)) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }
  void release() { std::ofstream(path("release")) << "go"; }
  // Reaps the workers, killing those still running after `limit`; returns exit codes.
  std::vector<int> finish(seconds limit) {
    std::vector<int> codes(pids_.size(), -1);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] <= 0) continue;
      int status = 0;
      while (::waitpid(pids_[i], &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pids_[i], SIGKILL);
          ::waitpid(pids_[i], &status, 0);
          break;
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids_[i] = -1;
    }
    return codes;
  }
  std::string status() {
    std::string out;
    run_command(std::string(TDIST_STATUS_BIN) + " " + endpoint(), &out);
    return out;
  }

 private:
  std::unique_ptr<TCPStoreServer> server_;
  std::string dir_;
  std::vector<pid_t> pids_;
};

TEST(HangTest, ASkippedCollectiveIsNamedByTheWarningStatusTimeoutAndFlightRecords) {
  Job job("skip", seconds(8));
  ASSERT_TRUE(job.wait_for({"at0", "at1", "at2"}, seconds(30)));
  // The warning, after TDIST_WAIT_WARNING = 1 s.
  const std::string missing = "rank 2 (computing; last: all_reduce #1 f32 x4 sum)";
  EXPECT_TRUE(job.wait_for_log(0, "all_reduce #2 f32 x4 sum has waited", seconds(10)))
      << job.file("log0");
  EXPECT_TRUE(contains(job.file("log0"), "not arrived: " + missing)) << job.file("log0");
  // tdist-status while the job hangs.
  const std::string status = job.status();
  EXPECT_TRUE(contains(status, "job at " + job.endpoint() + ": 3 ranks, 3 answered")) << status;
  EXPECT_TRUE(contains(status, "in all_reduce #2 f32 x4 sum of group default")) << status;
  EXPECT_TRUE(contains(status, "waiting for " + missing)) << status;
  EXPECT_TRUE(contains(status, "rank 2 (")) << status;
  EXPECT_TRUE(contains(status, "computing (in no collective)")) << status;
  // Rank 2's record on request (SIGUSR1); ranks 0 and 1 write theirs at the timeout.
  ::kill(job.pid(2), SIGUSR1);
  ASSERT_TRUE(job.wait_for({"error0", "error1", "flight_0.json", "flight_1.json", "flight_2.json"},
                           seconds(30)));
  for (int r : {0, 1}) {
    const std::string error = job.file("error" + std::to_string(r));
    EXPECT_TRUE(contains(error, "TimeoutError: ")) << error;
    EXPECT_TRUE(contains(error, "all_reduce #2")) << error;
    // Which rank timed out first varies; the other may fail on its abort notice, and may
    // find the first gone when it asks.
    EXPECT_TRUE(contains(error, "not arrived: ")) << error;
    EXPECT_TRUE(contains(error, missing)) << error;
  }
  std::string merged;
  EXPECT_EQ(run_command("python3 " TDIST_SOURCE_DIR "/tools/tdist_flight.py " + job.path("flight_"),
                        &merged),
            1);
  EXPECT_TRUE(contains(merged, "first disagreement at #2 (not called by every rank)")) << merged;
  EXPECT_TRUE(contains(merged,
                       "rank 2: did not call #2 (its last: all_reduce #1 f32 x4 sum, "
                       "completed)"))
      << merged;
  EXPECT_TRUE(contains(merged, "rank 0: all_reduce #2 f32 x4 sum, failed")) << merged;
  job.release();
  EXPECT_EQ(job.finish(seconds(30)), std::vector<int>(kWorld, 0)) << job.logs();
}

TEST(HangTest, DifferentOperationsGiveEveryRankADesyncErrorNamingBoth) {
  Job job("mismatch", seconds(60));
  ASSERT_TRUE(job.wait_for({"error0", "error1", "error2"}, seconds(20)));
  for (int r = 0; r < kWorld; ++r) {
    const std::string error = job.file("error" + std::to_string(r));
    EXPECT_TRUE(contains(error, "DesyncError: ")) << "rank " << r << ": " << error;
    EXPECT_TRUE(contains(error, "called broadcast #0 f32 x4 root 0")) << error;
    EXPECT_TRUE(contains(error, "called all_reduce #0 f32 x4 sum")) << error;
  }
  EXPECT_EQ(job.finish(seconds(30)), std::vector<int>(kWorld, 0)) << job.logs();
}

TEST(HangTest, ARankComputingIsNamedWhileTheOthersWaitAndTheJobThenFinishes) {
  Job job("sleep", seconds(60));
  ASSERT_TRUE(job.wait_for({"at0", "at1", "at2"}, seconds(30)));
  const std::string missing = "rank 1 (computing; last: all_reduce #0 f32 x4 sum)";
  EXPECT_TRUE(job.wait_for_log(2, "not arrived: " + missing, seconds(10))) << job.file("log2");
  const std::string status = job.status();
  EXPECT_TRUE(contains(status, "waiting for " + missing)) << status;
  job.release();
  EXPECT_EQ(job.finish(seconds(30)), std::vector<int>(kWorld, 0)) << job.logs();
  EXPECT_FALSE(std::filesystem::exists(job.path("error0")));
}

TEST(HangTest, AKilledRankFailsTheOthersAndStatusSaysItDoesNotAnswer) {
  Job job("kill", seconds(60));
  ASSERT_TRUE(job.wait_for({"at0", "at2"}, seconds(30)));
  for (int r : {0, 2}) {
    const std::string error = job.file("error" + std::to_string(r));
    EXPECT_TRUE(contains(error, "PeerError: ")) << error;
    EXPECT_TRUE(contains(error, "rank 1")) << error;
  }
  const std::string status = job.status();
  EXPECT_TRUE(contains(status, "rank 1: no answer (dead, or its process is stopped)")) << status;
  EXPECT_TRUE(contains(status, "2 answered")) << status;
  job.release();
  const std::vector<int> codes = job.finish(seconds(30));
  EXPECT_EQ(codes[0], 0) << job.logs();
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(codes[2], 0) << job.logs();
}

// tdistrun's job record (diag/job_record.h) lives under XDG_RUNTIME_DIR, here a folder of
// the test's own.
TEST(HangTest, TdistStatusFindsATdistrunJobAndTheTokenTdistrunMade) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tdist_hang_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const std::string runtime = dir + "/runtime";
  const std::string elsewhere = dir + "/elsewhere";
  std::filesystem::create_directories(runtime);
  std::filesystem::create_directories(elsewhere);
  std::vector<std::string> envs = test_support::environment_without(is_managed);
  envs.push_back("XDG_RUNTIME_DIR=" + runtime);
  const pid_t launcher = test_support::spawn_exec(
      {TDIST_TDISTRUN_BIN, "--standalone", "--nproc-per-node", std::to_string(kWorld),
       TDIST_HANG_WORKER, "sleep", dir, pg_test::test_backend(), "60000"},
      std::move(envs));
  auto exists = [&](const std::string& name) { return std::filesystem::exists(dir + "/" + name); };
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (!(exists("at0") && exists("at2")) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const std::string record_path = runtime + "/tdist/job-" + std::to_string(launcher);
  const std::string record = read(record_path);
  EXPECT_TRUE(contains(record, "token=")) << record;
  const size_t at = record.find("endpoint=");
  ASSERT_NE(at, std::string::npos) << record;
  const std::string endpoint = record.substr(at + 9, record.find('\n', at) - at - 9);

  const std::string status_bin =
      std::string("env -u TDIST_AUTH_TOKEN -u TDIST_AUTH_TOKEN_FILE ") + TDIST_STATUS_BIN;
  std::string out;
  EXPECT_EQ(run_command("XDG_RUNTIME_DIR=" + runtime + " " + status_bin, &out), 0) << out;
  EXPECT_TRUE(contains(out, "job at " + endpoint + ": 3 ranks, 3 answered")) << out;
  EXPECT_TRUE(contains(out, "waiting for rank 1 (computing; last: all_reduce #0 f32 x4 sum)"))
      << out;
  EXPECT_EQ(run_command("XDG_RUNTIME_DIR=" + runtime + " " + status_bin + " --job " +
                            std::to_string(launcher),
                        &out),
            0)
      << out;
  // Without the record, the endpoint alone is not enough: the job's store wants the token.
  EXPECT_EQ(run_command("XDG_RUNTIME_DIR=" + elsewhere + " " + status_bin + " " + endpoint, &out),
            2)
      << out;
  EXPECT_FALSE(contains(out, "answered")) << out;
  EXPECT_EQ(run_command("XDG_RUNTIME_DIR=" + elsewhere + " " + status_bin, &out), 2) << out;
  EXPECT_TRUE(contains(out, "no tdistrun of yours runs on this machine")) << out;

  std::ofstream(dir + "/release") << "go";
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + seconds(30);
  while (::waitpid(launcher, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(launcher, SIGKILL);
      ::waitpid(launcher, &status, 0);
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(std::filesystem::exists(record_path));  // removed at exit
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace tdist
