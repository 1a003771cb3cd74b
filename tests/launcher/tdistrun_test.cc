// End-to-end tests of the tdistrun binary on one node: each test fork+execs the real launcher
// with a controlled environment, its stdout and stderr going to files, and checks what the
// workers saw (the test programs write files) and what the user sees (exit code, console).
//
// The test process is a child subreaper, so whatever tdistrun leaves running when it exits
// becomes our child: "nothing is left" is checked as "this process has no children", and
// TearDown SIGKILLs and reaps any leftover before removing the test's temporary directory
// (also tdistrun's TMPDIR, so its run directories land there). Every wait is bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/spawn.h"  // environment_without
#include "tdist/settings.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kTdistrun = TDIST_TDISTRUN;
const std::string kBinDir = TDIST_TEST_BIN_DIR;
const std::string kEnvWorker = kBinDir + "/launcher_env_worker";
const std::string kFlakyWorker = kBinDir + "/launcher_flaky_worker";
const std::string kEchoWorker = kBinDir + "/launcher_echo_worker";
const fs::path kPyDir = fs::path(__FILE__).parent_path() / "py";

// A whole job normally takes well under a second; this only bounds a hang.
constexpr auto kJobLimit = 15s;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// "NAME=value" lines of an env_worker / env_printer.py report.
std::map<std::string, std::string> read_env_report(const fs::path& path) {
  std::map<std::string, std::string> vars;
  for (const std::string& line : split_lines(read_file(path))) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

// Alive = /proc/<pid> exists and is not a zombie.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// Our children right now (orphans of tdistrun arrive here: we are a subreaper).
std::vector<pid_t> children() {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string text = read_file(entry.path() / "stat");
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(text.substr(paren + 2));
    char state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == ::getpid()) out.push_back(std::stoi(name));
  }
  return out;
}

// Reaps children until none is left; false when some remain after `limit`.
bool no_children_within(Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    int status;
    pid_t reaped = ::waitpid(-1, &status, WNOHANG);
    if (reaped < 0 && errno == ECHILD) return true;
    if (reaped > 0) continue;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

void kill_children() {
  for (int pass = 0; pass < 50 && !no_children_within(100ms); ++pass) {
    for (pid_t pid : children()) ::kill(pid, SIGKILL);
  }
}

// Waits until `count` files <rank>.pid exist in `dir` (flaky_worker renames them into place)
// and returns their pids by rank; empty on timeout.
std::vector<pid_t> wait_for_pids(const fs::path& dir, int count) {
  const auto deadline = Clock::now() + kJobLimit;
  std::vector<pid_t> pids;
  while (Clock::now() < deadline) {
    pids.clear();
    for (int rank = 0; rank < count; ++rank) {
      const fs::path file = dir / (std::to_string(rank) + ".pid");
      if (fs::exists(file)) pids.push_back(std::stoi(read_file(file)));
    }
    if (static_cast<int>(pids.size()) == count) return pids;
    std::this_thread::sleep_for(10ms);
  }
  return {};
}

// A child process (argv[0] a path) with exactly `env`, its stdout and stderr in files of `dir`.
class Process {
 public:
  Process(const fs::path& dir, const std::vector<std::string>& argv,
          const std::vector<std::string>& env) {
    static int serial = 0;
    const std::string stem = (dir / ("process_" + std::to_string(serial++))).string();
    out_path_ = stem + ".out";
    err_path_ = stem + ".err";
    pid_ = spawn(argv, env);
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // The exit code (128 + signal when killed by one), or -1 when it did not end within
  // `limit` (the destructor SIGKILLs it; tdistrun's workers follow through PDEATHSIG).
  int wait(Clock::duration limit) {
    if (pid_ <= 0) return -1;
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  // spawn_exec with stdout and stderr into the files; everything built before the fork.
  pid_t spawn(std::vector<std::string> args, std::vector<std::string> env) {
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    const int out = ::open(out_path_.c_str(), flags, 0644);
    const int err = ::open(err_path_.c_str(), flags, 0644);
    const pid_t pid = out < 0 || err < 0 ? -1 : ::fork();
    if (pid == 0) {
      if (::dup2(out, STDOUT_FILENO) < 0 || ::dup2(err, STDERR_FILENO) < 0) ::_exit(126);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out);
    ::close(err);
    return pid;
  }

  std::string out_path_, err_path_;
  pid_t pid_ = -1;
};

// tdistrun's argv.
std::vector<std::string> tdistrun(std::vector<std::string> args) {
  args.insert(args.begin(), kTdistrun);
  return args;
}

struct Result {
  int code;
  std::string out, err;
};

class TdistrunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }

  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tdistrun_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    kill_children();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // This process's environment without anything a launcher sets or reads, plus TMPDIR (so
  // tdistrun's run directories land in dir_) and `extra`.
  std::vector<std::string> env(const std::vector<std::string>& extra = {}) const {
    static const std::vector<std::string> kDropped = words(
        "RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK "
        "ROLE_WORLD_SIZE ROLE_NAME MASTER_ADDR MASTER_PORT OMP_NUM_THREADS OPENBLAS_NUM_THREADS "
        "TMPDIR PYTHON ENV_WORKER_OUT_DIR FLAKY_PID_DIR");
    std::vector<std::string> out =
        tdist::test_support::environment_without([](const std::string& name) {
          return std::find(kDropped.begin(), kDropped.end(), name) != kDropped.end() ||
                 name.rfind("TORCHELASTIC_", 0) == 0 || name.rfind("TDIST_", 0) == 0 ||
                 name.rfind("PET_", 0) == 0;
        });
    out.push_back("TMPDIR=" + dir_.string());
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }

  Result run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
             Clock::duration limit = kJobLimit) {
    Process launcher(dir_, tdistrun(args), env(extra_env));
    const int code = launcher.wait(limit);
    return {code, launcher.out(), launcher.err()};
  }

  // Runs a job that the launcher must refuse: exit code not 0, exactly one line on stderr
  // containing every one of `names`, nothing on stdout, no process left.
  void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& names) {
    const Result r = run(args);
    EXPECT_GT(r.code, 0);
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(!r.err.empty() && r.err.find('\n') == r.err.size() - 1) << r.err;
    for (const std::string& name : names) EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_TRUE(no_children_within(2s));
  }

  struct Hanging {
    std::unique_ptr<Process> launcher;
    std::vector<pid_t> pids;  // by rank; empty when they did not all start
  };
  // tdistrun with 2 flaky workers that hang (`worker_flags` added), once both wrote their pid.
  Hanging start_hanging(const std::vector<std::string>& worker_flags,
                        const std::vector<std::string>& extra_env = {}) {
    const fs::path pid_dir = dir_ / "pids";
    fs::create_directory(pid_dir);
    std::vector<std::string> args = {"--nproc-per-node", "2", kFlakyWorker, "--hang"};
    args.insert(args.end(), worker_flags.begin(), worker_flags.end());
    std::vector<std::string> vars = {"FLAKY_PID_DIR=" + pid_dir.string()};
    vars.insert(vars.end(), extra_env.begin(), extra_env.end());
    Hanging h{std::make_unique<Process>(dir_, tdistrun(args), env(vars)),
              wait_for_pids(pid_dir, 2)};
    EXPECT_EQ(h.pids.size(), 2u) << h.launcher->err();
    for (pid_t pid : h.pids) EXPECT_TRUE(alive(pid)) << pid;
    return h;
  }

  fs::path dir_;
};

// --- The environment contract ------------------------------------------------------------

TEST_F(TdistrunTest, EveryWorkerGetsTheContractAndTheGroupForms) {
  const Result r = run({"--nproc-per-node", "3", "--max-restarts", "4", "--rdzv-id", "envjob",
                        "--role", "trainer", kEnvWorker, "--init"},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string()});
  ASSERT_EQ(r.code, 0) << r.err;  // --init: all_reduce and barrier through the launcher's store
  std::set<std::string> error_files, ports;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    const std::string r_text = std::to_string(rank);
    EXPECT_EQ(vars["RANK"], r_text);
    EXPECT_EQ(vars["LOCAL_RANK"], r_text);
    EXPECT_EQ(vars["WORLD_SIZE"], "3");
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(vars["GROUP_RANK"], "0");
    EXPECT_EQ(vars["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(vars["ROLE_RANK"], r_text);
    EXPECT_EQ(vars["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(vars["ROLE_NAME"], "trainer");
    EXPECT_EQ(vars["MASTER_ADDR"], "127.0.0.1");
    const int port = std::atoi(vars["MASTER_PORT"].c_str());
    EXPECT_TRUE(port > 0 && port < 65536) << vars["MASTER_PORT"];
    ports.insert(vars["MASTER_PORT"]);
    EXPECT_EQ(vars["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(vars["TORCHELASTIC_MAX_RESTARTS"], "4");
    EXPECT_EQ(vars["TORCHELASTIC_RUN_ID"], "envjob");
    EXPECT_NE(vars["TORCHELASTIC_ERROR_FILE"], "<unset>");
    error_files.insert(vars["TORCHELASTIC_ERROR_FILE"]);
    EXPECT_EQ(vars["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "1");
  }
  EXPECT_EQ(error_files.size(), 3u);
  EXPECT_EQ(ports.size(), 1u);
}

TEST_F(TdistrunTest, DefaultsAndTheUsersThreadCountsAreKept) {
  const Result r = run({"--nproc-per-node", "2", kEnvWorker},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string(), "OPENBLAS_NUM_THREADS=6"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> run_ids;
  for (int rank = 0; rank < 2; ++rank) {
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    EXPECT_EQ(vars["ROLE_NAME"], "default");
    EXPECT_EQ(vars["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(vars["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "6");
    run_ids.insert(vars["TORCHELASTIC_RUN_ID"]);
  }
  // A one-node job without --rdzv-id gets one random id, shared by its workers.
  ASSERT_EQ(run_ids.size(), 1u);
  EXPECT_NE(*run_ids.begin(), "none");
  EXPECT_NE(*run_ids.begin(), "<unset>");
}

TEST_F(TdistrunTest, OneWorkerGetsNoThreadLimits) {
  const Result r =
      run({"--nproc-per-node", "1", kEnvWorker}, {"ENV_WORKER_OUT_DIR=" + dir_.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  auto vars = read_env_report(dir_ / "rank_0.env");
  EXPECT_EQ(vars["WORLD_SIZE"], "1");
  EXPECT_EQ(vars["OMP_NUM_THREADS"], "<unset>");
  EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "<unset>");
}

TEST_F(TdistrunTest, PythonTorchProgramRunsUnmodified) {
  const std::string python = "/usr/bin/python3";
  Process probe(dir_, {python, "-c", "import torch, torch.distributed"}, env());
  if (probe.wait(30s) != 0) {
    GTEST_SKIP() << python << " cannot import torch and torch.distributed: " << probe.err();
  }
  const Result r = run({"--nproc-per-node", "2", (kPyDir / "env_printer.py").string(), "--init"},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string(), "PYTHON=" + python}, 60s);
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    EXPECT_EQ(vars["RANK"], std::to_string(rank));
    EXPECT_EQ(vars["WORLD_SIZE"], "2");
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "2");
  }
}

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

TEST_F(TdistrunTest, Sigusr1IsForwardedToTheWorkers) {
  // A shell worker that exits 0 once SIGUSR1 arrives; it says it is ready after the trap.
  const std::string script =
      "trap 'echo usr1 > \"$OUT/$RANK.usr1\"; exit 0' USR1; "
      "echo > \"$OUT/$RANK.tmp\" && mv \"$OUT/$RANK.tmp\" \"$OUT/$RANK.ready\"; "
      "while :; do sleep 0.05; done";
  Process launcher(dir_, tdistrun({"--nproc-per-node", "2", "/bin/sh", "-c", script}),
                   env({"OUT=" + dir_.string()}));
  const auto deadline = Clock::now() + kJobLimit;
  while (!(fs::exists(dir_ / "0.ready") && fs::exists(dir_ / "1.ready")) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(fs::exists(dir_ / "0.ready") && fs::exists(dir_ / "1.ready")) << launcher.err();
  ASSERT_EQ(::kill(launcher.pid(), SIGUSR1), 0);
  EXPECT_EQ(launcher.wait(5s), 128 + SIGUSR1) << launcher.err();
  EXPECT_EQ(read_file(dir_ / "0.usr1"), "usr1\n");
  EXPECT_EQ(read_file(dir_ / "1.usr1"), "usr1\n");
  EXPECT_TRUE(no_children_within(2s));
}

// --- Output ------------------------------------------------------------------------------

// The lines `launcher_echo_worker lines N TAG` prints.
std::vector<std::string> echo_lines(int count, const std::string& tag) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(tag + " line " + std::to_string(i) + " " + std::string(80, 'x'));
  }
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// The console lines of each rank with their "[host:rank N]:" prefix removed; a line with
// another prefix lands under rank -1.
std::map<int, std::vector<std::string>> by_prefix(const std::string& console) {
  std::map<int, std::vector<std::string>> out;
  const std::string host = "[" + hostname() + ":rank ";
  for (const std::string& line : split_lines(console)) {
    const size_t close = line.find("]:");
    if (line.rfind(host, 0) != 0 || close == std::string::npos) {
      out[-1].push_back(line);
      continue;
    }
    out[std::stoi(line.substr(host.size(), close - host.size()))].push_back(line.substr(close + 2));
  }
  return out;
}

TEST_F(TdistrunTest, TeePrefixesWholeLinesAndKeepsRawFiles) {
  // 200 lines of ~100 bytes: several stdio buffers, so the pipe sees lines cut anywhere.
  const Result r = run({"--nproc-per-node", "2", "--tee", "3", "--log-dir", dir_.string(),
                        "--rdzv-id", "teejob", kEchoWorker, "lines", "200", "T"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto console = by_prefix(r.out);
  EXPECT_EQ(console.count(-1), 0u) << console[-1].front();
  const std::vector<std::string> expected = echo_lines(200, "T");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(console[rank], expected) << "rank " << rank;
    const fs::path file = dir_ / "teejob" / "attempt_0" / std::to_string(rank) / "stdout.log";
    EXPECT_EQ(read_file(file), joined(expected)) << file;
  }
}

TEST_F(TdistrunTest, RedirectsKeepTheConsoleQuiet) {
  const Result r = run({"--nproc-per-node", "2", "--redirects", "3", "--log-dir", dir_.string(),
                        "--rdzv-id", "redirjob", kEchoWorker, "lines", "20", "R"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path file = dir_ / "redirjob" / "attempt_0" / std::to_string(rank) / "stdout.log";
    EXPECT_EQ(read_file(file), joined(echo_lines(20, "R"))) << file;
  }
}

TEST_F(TdistrunTest, LocalRanksFilterShowsOnlyChosenRanks) {
  const Result r =
      run({"--nproc-per-node", "2", "--tee", "3", "--local-ranks-filter", "1", "--log-dir",
           dir_.string(), "--rdzv-id", "filterjob", kEchoWorker, "lines", "20", "F"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto console = by_prefix(r.out);
  EXPECT_EQ(console.size(), 1u);
  EXPECT_EQ(console[1], echo_lines(20, "F"));
  const fs::path hidden = dir_ / "filterjob" / "attempt_0" / "0" / "stdout.log";
  EXPECT_EQ(read_file(hidden), joined(echo_lines(20, "F"))) << "filtered, yet still in its file";
}

// --- Side by side ----------------------------------------------------------------------------

TEST_F(TdistrunTest, TwoStandaloneJobsRunSideBySide) {
  fs::create_directory(dir_ / "a");
  fs::create_directory(dir_ / "b");
  const std::vector<std::string> args = {"--standalone", "--nproc-per-node", "2", kEnvWorker,
                                         "--init"};
  Process a(dir_, tdistrun(args), env({"ENV_WORKER_OUT_DIR=" + (dir_ / "a").string()}));
  Process b(dir_, tdistrun(args), env({"ENV_WORKER_OUT_DIR=" + (dir_ / "b").string()}));
  EXPECT_EQ(a.wait(kJobLimit), 0) << a.err();
  EXPECT_EQ(b.wait(kJobLimit), 0) << b.err();
  auto va = read_env_report(dir_ / "a" / "rank_0.env");
  auto vb = read_env_report(dir_ / "b" / "rank_0.env");
  EXPECT_NE(va["TDIST_AGENT_STORE"], vb["TDIST_AGENT_STORE"]);
  EXPECT_NE(va["TORCHELASTIC_RUN_ID"], vb["TORCHELASTIC_RUN_ID"]);
}

// --- Bad input ---------------------------------------------------------------------------

TEST_F(TdistrunTest, UnknownFlagIsRefused) {
  expect_refused({"--no-such-flag", kEchoWorker, "env"}, {"--no-such-flag"});
}

TEST_F(TdistrunTest, BadNodeRangeIsRefused) {
  expect_refused({"--nnodes", "3:2", kEchoWorker, "env"}, {"--nnodes", "3:2"});
}

TEST_F(TdistrunTest, MissingProgramIsRefused) {
  const std::string missing = (dir_ / "no_such_program").string();
  expect_refused({"--nproc-per-node", "2", missing}, {missing});
}

TEST_F(TdistrunTest, PortInUseIsRefused) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // --node-rank 0 of a static rendezvous must host the store. (Without it, a taken port is
  // taken to mean another local agent hosts, and tdistrun connects to our silent socket.)
  expect_refused({"--nnodes", "1", "--rdzv-backend", "static", "--node-rank", "0", "--master-addr",
                  "127.0.0.1", "--master-port", port, kEchoWorker, "env"},
                 {port, "in use"});
  ::close(fd);
}

// --- Help ----------------------------------------------------------------------------------

TEST_F(TdistrunTest, HelpExplainsEveryFlag) {
  const Result r = run({"--help"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& flag :
       words("--nproc-per-node --nnodes --node-rank --master-addr --master-port --rdzv-endpoint "
             "--rdzv-id --rdzv-timeout --rdzv-backend --rdzv-conf --standalone --max-restarts "
             "--monitor-interval --term-timeout --redirects --tee --log-dir --local-ranks-filter "
             "--role --module --no-python --run-path --start-method --local-addr --help-env "
             "--version")) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(TdistrunTest, HelpEnvListsTimeoutWithItsDefault) {
  const Result r = run({"--help-env"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string default_value(tdist::find_setting("TDIST_TIMEOUT").default_value);
  bool listed = false;
  for (const std::string& line : split_lines(r.out)) {
    const std::vector<std::string> columns = words(line);
    if (columns.size() >= 2 && columns[0] == "TDIST_TIMEOUT") listed = columns[1] == default_value;
  }
  EXPECT_TRUE(listed) << r.out;
}

}  // namespace
