// End-to-end tests of the tdistrun binary on one node, the workers' lifecycle: failed
// workers restarted or, once restarts are used up, named in the summary with their exit
// code, signal or uncaught error; and signals to the launcher (SIGTERM, SIGINT, a grace
// before SIGKILL, the launcher itself SIGKILLed, SIGUSR1 forwarded). The fixture
// (tdistrun_test_util.h) says how the launcher is started and checked.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "launcher/tdistrun_test_util.h"

namespace tdist::tdistrun_test {
namespace {

// --- Failures and restarts -----------------------------------------------------------------

TEST_F(TdistrunTest, FailureOnFirstAttemptIsRestartedOnce) {
  // Each worker appends the restart count it saw, then becomes a flaky worker whose rank 1
  // fails only while TORCHELASTIC_RESTART_COUNT < 1.
  const std::string script =
      "echo \"$TORCHELASTIC_RESTART_COUNT\" >> \"$ATTEMPTS_DIR/$RANK\"; "
      "exec \"$FLAKY\" --fail-rank 1 --fail-attempts 1 --exit-code 5";
  const Result r = run({"--nproc-per-node", "2", "--max-restarts", "3", "/bin/sh", "-c", script},
                       {"ATTEMPTS_DIR=" + dir_.string(), "FLAKY=" + kFlakyWorker});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "restarting the workers"), 1u) << r.err;
  EXPECT_EQ(count_of(r.err, "failed with exit code 5"), 1u) << r.err;
  EXPECT_EQ(read_file(dir_ / "1"), "0\n1\n");
  // Rank 0 may be stopped before its shell wrote anything on the first attempt.
  const std::string rank0 = read_file(dir_ / "0");
  EXPECT_TRUE(rank0 == "1\n" || rank0 == "0\n1\n") << rank0;
}

TEST_F(TdistrunTest, AlwaysFailingWorkerExhaustsRestartsAndIsNamed) {
  const Result r = run({"--nproc-per-node", "2", "--max-restarts", "2", kFlakyWorker, "--fail-rank",
                        "1", "--fail-attempts", "100", "--exit-code", "7"});
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(count_of(r.err, "restarting the workers"), 2u) << r.err;
  EXPECT_NE(r.err.find("1 worker failed; restarts used: 2 of 2"), std::string::npos) << r.err;
  const size_t root = r.err.find("Root cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("rank 1 (local rank 1) on " + hostname()), std::string::npos) << summary;
  EXPECT_NE(summary.find("exit code 7"), std::string::npos) << summary;
}

TEST_F(TdistrunTest, UncaughtErrorMessageReachesTheSummary) {
  const std::string message = "disk quota of shard 42 exceeded";
  const Result r = run({kFlakyWorker, "--fail-attempts", "1", "--throw", message});
  EXPECT_EQ(r.code, 134) << r.err;  // an escaping exception ends in abort()
  EXPECT_NE(r.err.find("SIGABRT"), std::string::npos) << r.err;
  // Read from TORCHELASTIC_ERROR_FILE, not only from the stderr tail.
  bool error_line = false;
  for (const std::string& line : split_lines(r.err)) {
    if (line.find("error: ") != std::string::npos && line.find(message) != std::string::npos &&
        line.find("uncaught") == std::string::npos) {
      error_line = true;
    }
  }
  EXPECT_TRUE(error_line) << r.err;
}

TEST_F(TdistrunTest, WorkerKilledBySignalIsReportedByName) {
  const Result r = run({kFlakyWorker, "--fail-attempts", "1", "--signal", "SEGV"});
  EXPECT_EQ(r.code, 139) << r.err;
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

// --- Signals to the launcher ---------------------------------------------------------------

TEST_F(TdistrunTest, SigtermStopsEveryWorker) {
  auto [launcher, pids] = start_hanging({});
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(launcher->pid(), SIGTERM), 0);
  EXPECT_EQ(launcher->wait(5s), 143) << launcher->err();
  EXPECT_TRUE(no_children_within(2s));
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << pid;
}

TEST_F(TdistrunTest, SigintExitsWith130) {
  auto [launcher, pids] = start_hanging({});
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(launcher->pid(), SIGINT), 0);
  EXPECT_EQ(launcher->wait(5s), 130) << launcher->err();
  EXPECT_TRUE(no_children_within(2s));
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << pid;
}

TEST_F(TdistrunTest, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  auto [launcher, pids] = start_hanging({"--ignore-term"}, {"TDIST_TERM_TIMEOUT=1"});
  ASSERT_EQ(pids.size(), 2u);
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(launcher->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(400ms);
  for (pid_t pid : pids) EXPECT_TRUE(alive(pid)) << "SIGTERM is ignored: alive in the grace";
  EXPECT_EQ(launcher->wait(3s), 143) << launcher->err();
  const auto took = Clock::now() - sent;
  EXPECT_GE(took, 900ms);
  EXPECT_LE(took, 3s);
  EXPECT_TRUE(no_children_within(2s));
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << pid;
}

TEST_F(TdistrunTest, SigkilledLauncherTakesItsWorkersAlong) {
  auto [launcher, pids] = start_hanging({});
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(launcher->pid(), SIGKILL), 0);
  EXPECT_EQ(launcher->wait(2s), 128 + SIGKILL);
  EXPECT_TRUE(no_children_within(2s));  // PDEATHSIG: the orphans died and came to us
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << pid;
}

// The workers' own children go too: the watchdog kills each worker's process group once the
// launcher is gone (PDEATHSIG reaches only the workers themselves), and removes the
// launcher's temporary directory.
TEST_F(TdistrunTest, SigkilledLauncherTakesTheWorkersChildrenAlong) {
  const std::string script =
      "sleep 300 & echo $! > \"$OUT/$RANK.tmp\" && mv \"$OUT/$RANK.tmp\" \"$OUT/$RANK.child\"; "
      "wait";
  const fs::path tmp = dir_ / "tmp";  // the launcher's run directory goes here
  fs::create_directory(tmp);
  Process launcher(dir_, tdistrun({"--nproc-per-node", "2", "/bin/sh", "-c", script}),
                   env({"OUT=" + dir_.string(), "TMPDIR=" + tmp.string()}));
  ASSERT_TRUE(wait_for_rank_files(dir_, ".child", 2)) << launcher.err();
  const std::vector<pid_t> grandchildren = {std::stoi(read_file(dir_ / "0.child")),
                                            std::stoi(read_file(dir_ / "1.child"))};
  for (pid_t pid : grandchildren) ASSERT_TRUE(alive(pid)) << pid;
  ASSERT_EQ(::kill(launcher.pid(), SIGKILL), 0);
  EXPECT_EQ(launcher.wait(2s), 128 + SIGKILL);
  const auto gone_by = Clock::now() + 1s;
  bool any_alive = true;
  while (any_alive && Clock::now() < gone_by) {
    any_alive = alive(grandchildren[0]) || alive(grandchildren[1]);
    if (any_alive) std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(any_alive) << "a worker's child outlived the launcher by 1 s";
  EXPECT_TRUE(no_children_within(2s));  // the watchdog too
  EXPECT_TRUE(fs::is_empty(tmp)) << "the launcher's temporary directory was left behind";
}

// Two failures reaped in one pass are ordered by when they happened: rank 1 fails first (its
// error file says when), rank 0 later; the launcher, stopped meanwhile, reaps both at once,
// rank 0 first. The summary still names rank 1 as the root cause, and exits with its code.
TEST_F(TdistrunTest, RootCauseIsTheFirstFailureEvenWhenReapedTogether) {
  const std::string script =
      "touch \"$OUT/$RANK.ready\"; while [ ! -e \"$OUT/go\" ]; do sleep 0.01; done; "
      "if [ \"$RANK\" = 1 ]; then "
      "  echo '{\"message\": \"rank 1 broke first\"}' > \"$TORCHELASTIC_ERROR_FILE\"; exit 3; "
      "fi; "
      "sleep 0.3; echo '{\"message\": \"rank 0 followed\"}' > \"$TORCHELASTIC_ERROR_FILE\"; "
      "exit 4";
  Process launcher(dir_, tdistrun({"--nproc-per-node", "2", "/bin/sh", "-c", script}),
                   env({"OUT=" + dir_.string()}));
  ASSERT_TRUE(wait_for_rank_files(dir_, ".ready", 2)) << launcher.err();
  ASSERT_EQ(::kill(launcher.pid(), SIGSTOP), 0);
  std::ofstream(dir_ / "go").put('\n');
  std::this_thread::sleep_for(1s);  // both fail while the launcher cannot reap them
  ASSERT_EQ(::kill(launcher.pid(), SIGCONT), 0);
  EXPECT_EQ(launcher.wait(kJobLimit), 3) << launcher.err();
  const std::string err = launcher.err();
  const size_t root = err.find("Root cause");
  ASSERT_NE(root, std::string::npos) << err;
  EXPECT_LT(err.find("rank 1 broke first", root), err.find("rank 0 followed", root)) << err;
  EXPECT_TRUE(no_children_within(2s));
}

TEST_F(TdistrunTest, Sigusr1IsForwardedToTheWorkers) {
  // A shell worker that exits 0 once SIGUSR1 arrives; it says it is ready after the trap.
  const std::string script =
      "trap 'echo usr1 > \"$OUT/$RANK.usr1\"; exit 0' USR1; "
      "echo > \"$OUT/$RANK.tmp\" && mv \"$OUT/$RANK.tmp\" \"$OUT/$RANK.ready\"; "
      "while :; do sleep 0.05; done";
  Process launcher(dir_, tdistrun({"--nproc-per-node", "2", "/bin/sh", "-c", script}),
                   env({"OUT=" + dir_.string()}));
  ASSERT_TRUE(wait_for_rank_files(dir_, ".ready", 2)) << launcher.err();
  ASSERT_EQ(::kill(launcher.pid(), SIGUSR1), 0);
  EXPECT_EQ(launcher.wait(5s), 128 + SIGUSR1) << launcher.err();
  EXPECT_EQ(read_file(dir_ / "0.usr1"), "usr1\n");
  EXPECT_EQ(read_file(dir_ / "1.usr1"), "usr1\n");
  EXPECT_TRUE(no_children_within(2s));
}

}  // namespace
}  // namespace tdist::tdistrun_test
