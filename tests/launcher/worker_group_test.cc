// WorkerGroup with real processes (/bin/sh scripts and launcher_echo_worker): exits,
// failures, signals, stop with a grace period, process groups, PDEATHSIG, output relay
// (whole prefixed lines, raw files, stderr tail, filtering), exact environment, exec errors.
#include "tdistrun/worker_group.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/temp_dir.h"
#include "tdist/error.h"
#include "tdistrun/signals.h"

namespace tdist::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Event = WorkerGroup::Event;

const std::string kEchoWorker = std::string(TDIST_TEST_BIN_DIR) + "/launcher_echo_worker";

using test_support::read_file;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Redirects `fd` (1 or 2) to a file while alive; restore_and_read() gives what arrived.
class CaptureFd {
 public:
  CaptureFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    std::fflush(nullptr);
    saved_ = ::dup(fd_);
    int file = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(file, fd_);
    ::close(file);
  }
  ~CaptureFd() { restore(); }
  std::string restore_and_read() {
    restore();
    return read_file(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(nullptr);
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_;
  std::string path_;
  int saved_ = -1;
};

// True when pid runs no more: gone, or a zombie left to a reaper other than this process.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) < 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool wait_gone(pid_t pid, Clock::duration within) {
  for (auto end = Clock::now() + within; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
    if (process_gone(pid)) return true;
  }
  return process_gone(pid);
}

// The content of `path` once it exists ("" after `within`).
std::string wait_for_file(const std::string& path, Clock::duration within) {
  for (auto end = Clock::now() + within; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
    if (std::filesystem::exists(path)) return read_file(path);
  }
  return "";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

WorkerSpec sh_worker(int rank, const std::string& script) {
  WorkerSpec spec;
  spec.local_rank = rank;
  spec.global_rank = rank + 10;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  return spec;
}

class WorkerGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Signals::install();
    char name[] = "/tmp/tdist_worker_group_XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<WorkerGroup> start(std::vector<WorkerSpec> specs) {
    return WorkerGroup::start(std::move(specs));
  }

  std::string dir_;
};

Event wait_for(WorkerGroup& group, Clock::duration within) {
  return group.wait(Clock::now() + within);
}

TEST_F(WorkerGroupTest, AllSucceed) {
  auto group = start({sh_worker(0, "exit 0"), sh_worker(1, "exit 0"), sh_worker(2, "exit 0")});
  ASSERT_EQ(wait_for(*group, 10s), Event::kAllSucceeded);
  ASSERT_EQ(group->exits().size(), 3u);
  std::set<int> ranks;
  std::set<pid_t> pids;
  for (const WorkerExit& exit : group->exits()) {
    EXPECT_FALSE(exit.failed());
    EXPECT_FALSE(exit.stopped_by_us);
    EXPECT_EQ(exit.global_rank, exit.local_rank + 10);
    ranks.insert(exit.local_rank);
    pids.insert(exit.pid);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  std::vector<pid_t> started = group->pids();
  EXPECT_EQ(pids, std::set<pid_t>(started.begin(), started.end()));
}

TEST_F(WorkerGroupTest, OneFailsThenTheRestAreStopped) {
  auto group = start({sh_worker(0, "exec sleep 30"), sh_worker(1, "exit 3")});
  Clock::time_point t0 = Clock::now();
  ASSERT_EQ(wait_for(*group, 10s), Event::kWorkerFailed);
  EXPECT_LT(seconds_since(t0), 5.0);
  ASSERT_EQ(group->exits().size(), 1u);
  const WorkerExit& failed = group->exits()[0];
  EXPECT_EQ(failed.local_rank, 1);
  EXPECT_EQ(failed.global_rank, 11);
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.signal, 0);
  EXPECT_FALSE(failed.stopped_by_us);
  EXPECT_EQ(wait_for(*group, 1s), Event::kWorkerFailed);  // stays reported

  group->stop(SIGTERM, 5s);
  ASSERT_EQ(group->exits().size(), 2u);
  const WorkerExit& stopped = group->exits()[1];
  EXPECT_EQ(stopped.local_rank, 0);
  EXPECT_EQ(stopped.signal, SIGTERM);
  EXPECT_EQ(stopped.exit_code, -SIGTERM);
  EXPECT_TRUE(stopped.stopped_by_us);
  group->stop(SIGTERM, 5s);  // idempotent
  EXPECT_EQ(group->exits().size(), 2u);
}

TEST_F(WorkerGroupTest, KilledBySignal) {
  auto group = start({sh_worker(0, "kill -KILL $$")});
  ASSERT_EQ(wait_for(*group, 10s), Event::kWorkerFailed);
  ASSERT_EQ(group->exits().size(), 1u);
  EXPECT_EQ(group->exits()[0].signal, SIGKILL);
  EXPECT_EQ(group->exits()[0].exit_code, -SIGKILL);
  EXPECT_TRUE(group->exits()[0].failed());
}

TEST_F(WorkerGroupTest, TimeoutThenStopEscalatesToSigkillAfterGrace) {
  std::string ready = dir_ + "/ready";
  auto group = start({sh_worker(0, "trap '' TERM; touch " + ready + "; sleep 100")});
  wait_for_file(ready, 5s);
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the worker never got ready";

  Clock::time_point t0 = Clock::now();
  EXPECT_EQ(wait_for(*group, 200ms), Event::kTimeout);
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_LT(seconds_since(t0), 2.0);

  t0 = Clock::now();
  group->stop(SIGTERM, 500ms);
  double elapsed = seconds_since(t0);
  EXPECT_GE(elapsed, 0.5);
  EXPECT_LT(elapsed, 2.5);
  ASSERT_EQ(group->exits().size(), 1u);
  EXPECT_EQ(group->exits()[0].signal, SIGKILL);
  EXPECT_TRUE(group->exits()[0].stopped_by_us);
}

TEST_F(WorkerGroupTest, FurtherSignalCutsTheGraceShort) {
  std::string ready = dir_ + "/ready";
  auto group = start(
      {sh_worker(0, "trap '' TERM; touch " + ready + "; sleep 0.3; kill -TERM $PPID; sleep 100")});
  wait_for_file(ready, 5s);
  ASSERT_TRUE(std::filesystem::exists(ready));
  Clock::time_point t0 = Clock::now();
  group->stop(SIGTERM, 30s);
  EXPECT_LT(seconds_since(t0), 5.0);
  ASSERT_EQ(group->exits().size(), 1u);
  EXPECT_EQ(group->exits()[0].signal, SIGKILL);
}

TEST_F(WorkerGroupTest, StopReachesTheWorkersChildren) {
  std::string pid_file = dir_ + "/pid";
  auto group = start({sh_worker(0, "sleep 100 & echo $! > " + pid_file + ".tmp && mv " + pid_file +
                                       ".tmp " + pid_file + "; wait")});
  std::string text = wait_for_file(pid_file, 5s);
  ASSERT_FALSE(text.empty());
  pid_t grandchild = std::stoi(text);
  EXPECT_FALSE(process_gone(grandchild));
  Clock::time_point t0 = Clock::now();
  group->stop(SIGTERM, 5s);
  EXPECT_LT(seconds_since(t0), 4.0);  // the shell died of SIGTERM, not of the SIGKILL after
  bool gone = wait_gone(grandchild, 2s);
  if (!gone) ::kill(grandchild, SIGKILL);
  EXPECT_TRUE(gone);
}

TEST_F(WorkerGroupTest, TeedLinesArriveWholeAndPrefixed) {
  constexpr int kWorkers = 4;
  constexpr int kLines = 2000;
  std::vector<WorkerSpec> specs;
  for (int r = 0; r < kWorkers; ++r) {
    WorkerSpec spec;
    spec.local_rank = r;
    spec.argv = {kEchoWorker, "lines", std::to_string(kLines), "w" + std::to_string(r)};
    spec.tee_mask = kStdoutBit;
    spec.stdout_path = dir_ + "/rank" + std::to_string(r) + "/stdout.log";
    spec.prefix = "[host:rank " + std::to_string(r) + "]:";
    specs.push_back(spec);
  }
  Event event;
  std::string console;
  {
    CaptureFd capture(STDOUT_FILENO, dir_ + "/console");
    auto group = start(specs);
    event = wait_for(*group, 30s);
    group.reset();
    console = capture.restore_and_read();
  }
  ASSERT_EQ(event, Event::kAllSucceeded);

  auto expected_line = [](int rank, int i) {
    return "w" + std::to_string(rank) + " line " + std::to_string(i) + " " + std::string(80, 'x');
  };
  std::vector<int> next(kWorkers, 0);
  size_t bad = 0;
  for (const std::string& line : split_lines(console)) {
    int rank = -1;
    for (int r = 0; r < kWorkers; ++r) {
      if (line.rfind(specs[static_cast<size_t>(r)].prefix, 0) == 0) rank = r;
    }
    if (rank < 0 || next[static_cast<size_t>(rank)] >= kLines) {
      ++bad;
      continue;
    }
    int& i = next[static_cast<size_t>(rank)];
    if (line == specs[static_cast<size_t>(rank)].prefix + expected_line(rank, i)) {
      ++i;
    } else {
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u);
  for (int r = 0; r < kWorkers; ++r) {
    EXPECT_EQ(next[static_cast<size_t>(r)], kLines) << "rank " << r;
    std::string file_expected;
    for (int i = 0; i < kLines; ++i) file_expected += expected_line(r, i) + "\n";
    EXPECT_EQ(read_file(specs[static_cast<size_t>(r)].stdout_path), file_expected) << "rank " << r;
  }
}

TEST_F(WorkerGroupTest, LongLineIsShownInPiecesAndTheTailGetsANewline) {
  WorkerSpec spec;
  spec.argv = {kEchoWorker, "long", "100000"};
  spec.tee_mask = kStdoutBit;
  spec.stdout_path = dir_ + "/stdout.log";
  spec.prefix = "[p]:";
  Event event;
  std::string console;
  {
    CaptureFd capture(STDOUT_FILENO, dir_ + "/console");
    auto group = start({spec});
    event = wait_for(*group, 10s);
    group.reset();
    console = capture.restore_and_read();
  }
  ASSERT_EQ(event, Event::kAllSucceeded);
  std::string raw = read_file(spec.stdout_path);
  ASSERT_EQ(raw.size(), 100000u);
  EXPECT_EQ(console, "[p]:" + raw.substr(0, StreamRelay::kMaxLineBytes) +
                         "\n[p]:" + raw.substr(StreamRelay::kMaxLineBytes) + "\n");
}

TEST_F(WorkerGroupTest, RedirectedStreamsGoOnlyToTheirFiles) {
  WorkerSpec spec = sh_worker(0, "echo out1; echo err1 >&2; printf tail");
  spec.redirect_mask = kStdoutBit | kStderrBit;
  spec.stdout_path = dir_ + "/logs/0/stdout.log";  // missing directories are made
  spec.stderr_path = dir_ + "/logs/0/stderr.log";
  std::filesystem::create_directories(dir_ + "/logs/0");
  write_file(spec.stdout_path, "old\n");  // appended to, not truncated
  Event event;
  std::string out, err;
  {
    CaptureFd capture_out(STDOUT_FILENO, dir_ + "/console_out");
    CaptureFd capture_err(STDERR_FILENO, dir_ + "/console_err");
    auto group = start({spec});
    event = wait_for(*group, 10s);
    EXPECT_EQ(group->stderr_tail(0, 5), "err1\n");
    group.reset();
    err = capture_err.restore_and_read();
    out = capture_out.restore_and_read();
  }
  ASSERT_EQ(event, Event::kAllSucceeded);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  EXPECT_EQ(read_file(spec.stdout_path), "old\nout1\ntail");
  EXPECT_EQ(read_file(spec.stderr_path), "err1\n");
}

TEST_F(WorkerGroupTest, UnteedStreamsReachTheConsoleUnchanged) {
  WorkerSpec spec =
      sh_worker(0, "echo out; printf 'a\\nb\\r50%%\\r100%%\\n' >&2; printf 'no newline' >&2");
  spec.prefix = "[unused]:";  // only teed lines get it
  Event event;
  std::string out, err;
  {
    CaptureFd capture_out(STDOUT_FILENO, dir_ + "/console_out");
    CaptureFd capture_err(STDERR_FILENO, dir_ + "/console_err");
    auto group = start({spec});
    event = wait_for(*group, 10s);
    group.reset();
    err = capture_err.restore_and_read();
    out = capture_out.restore_and_read();
  }
  ASSERT_EQ(event, Event::kAllSucceeded);
  EXPECT_EQ(out, "out\n");
  EXPECT_EQ(err, "a\nb\r50%\r100%\nno newline\n");
}

TEST_F(WorkerGroupTest, FilteredWorkerShowsNothingButKeepsItsStderrTail) {
  WorkerSpec spec =
      sh_worker(0,
                "i=0; while [ $i -lt 20000 ]; do echo \"out $i\"; echo \"err $i\" >&2; i=$((i+1)); "
                "done; exit 1");
  spec.console = false;
  Event event;
  std::string out, err;
  std::string tail;
  {
    CaptureFd capture_out(STDOUT_FILENO, dir_ + "/console_out");
    CaptureFd capture_err(STDERR_FILENO, dir_ + "/console_err");
    auto group = start({spec});
    event = wait_for(*group, 30s);
    group->stop(SIGTERM, 1s);
    tail = group->stderr_tail(0, 3);
    EXPECT_EQ(group->stderr_tail(7, 3), "");  // no such rank
    group.reset();
    err = capture_err.restore_and_read();
    out = capture_out.restore_and_read();
  }
  ASSERT_EQ(event, Event::kWorkerFailed);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  EXPECT_EQ(tail, "err 19997\nerr 19998\nerr 19999\n");
}

TEST_F(WorkerGroupTest, EnvironmentIsExactlyWhatWasGiven) {
  WorkerSpec spec;
  spec.argv = {kEchoWorker, "env"};
  spec.env = {"A=1", "B=two words", "EMPTY=", "PATH=/nowhere"};
  spec.redirect_mask = kStdoutBit;
  spec.stdout_path = dir_ + "/env.txt";
  auto group = start({spec});
  ASSERT_EQ(wait_for(*group, 10s), Event::kAllSucceeded);
  std::vector<std::string> lines = split_lines(read_file(spec.stdout_path));
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, spec.env);
}

TEST_F(WorkerGroupTest, ProgramIsLookedUpInTheWorkersPath) {
  WorkerSpec found = sh_worker(0, "");
  found.argv = {"sh", "-c", "exit 4"};
  found.env = {"PATH=/nonexistent:/usr/bin:/bin"};
  WorkerSpec missing = found;
  missing.local_rank = 1;
  missing.env = {"PATH=/nonexistent"};
  missing.console = false;
  auto group = start({found, missing});
  std::map<int, int> codes;
  while (codes.size() < 2 && wait_for(*group, 10s) == Event::kWorkerFailed) {
    for (const WorkerExit& exit : group->exits()) codes[exit.local_rank] = exit.exit_code;
    if (codes.size() < 2) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(codes[0], 4);
  EXPECT_EQ(codes[1], 127);
  EXPECT_EQ(group->stderr_tail(1, 5), "tdistrun: cannot execute 'sh': No such file or directory\n");
}

TEST_F(WorkerGroupTest, ExecFailureExits127WithTheReason) {
  std::string not_executable = dir_ + "/script";
  write_file(not_executable, "#!/bin/sh\n");
  WorkerSpec missing = sh_worker(0, "");
  missing.argv = {"/nonexistent/prog"};
  missing.console = false;
  WorkerSpec denied = missing;
  denied.local_rank = 1;
  denied.argv = {not_executable};
  auto group = start({missing, denied});
  // wait() answers kWorkerFailed at once after the first failure: poll for the second.
  for (auto end = Clock::now() + 10s; group->exits().size() < 2 && Clock::now() < end;) {
    group->wait(end);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(group->exits().size(), 2u);
  for (const WorkerExit& exit : group->exits()) EXPECT_EQ(exit.exit_code, 127);
  EXPECT_EQ(group->stderr_tail(0, 5),
            "tdistrun: cannot execute '/nonexistent/prog': No such file or directory\n");
  EXPECT_EQ(group->stderr_tail(1, 5),
            "tdistrun: cannot execute '" + not_executable + "': Permission denied\n");
}

TEST_F(WorkerGroupTest, BadSpecThrowsAndLeavesNothingRunning) {
  WorkerSpec no_file = sh_worker(1, "exit 0");
  no_file.redirect_mask = kStderrBit;
  EXPECT_THROW(start({sh_worker(0, "exec sleep 100"), no_file}), InvalidArgument);
  WorkerSpec no_program;
  EXPECT_THROW(start({no_program}), InvalidArgument);
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);  // the started worker was reaped
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(WorkerGroupTest, SignalArrivingDuringWait) {
  auto group = start({sh_worker(0, "sleep 0.2; kill -TERM $PPID; exec sleep 100")});
  ASSERT_EQ(wait_for(*group, 10s), Event::kSignal);
  // The first one this process saw (every signal these tests send is SIGTERM).
  EXPECT_EQ(Signals::install().terminating_signal(), SIGTERM);
  group->stop(SIGTERM, 5s);
  ASSERT_EQ(group->exits().size(), 1u);
  EXPECT_EQ(group->exits()[0].signal, SIGTERM);
  EXPECT_TRUE(group->exits()[0].stopped_by_us);
}

TEST_F(WorkerGroupTest, WorkerDiesWithAKilledLauncher) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::fflush(nullptr);
  pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {  // a stand-in launcher: starts `sleep 60`, reports its pid, waits
    ::alarm(30);
    ::close(pipe_fds[0]);
    try {
      WorkerSpec spec = sh_worker(0, "");
      spec.argv = {"sleep", "60"};
      auto group = WorkerGroup::start({spec});
      pid_t worker = group->pids()[0];
      if (::write(pipe_fds[1], &worker, sizeof(worker)) != sizeof(worker)) ::_exit(1);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(pipe_fds[1]);
  pid_t worker = -1;
  ssize_t n = ::read(pipe_fds[0], &worker, sizeof(worker));
  ::close(pipe_fds[0]);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(worker)));
  bool gone = wait_gone(worker, 2s);
  if (!gone) ::kill(worker, SIGKILL);
  EXPECT_TRUE(gone);
}

}  // namespace
}  // namespace tdist::launcher
