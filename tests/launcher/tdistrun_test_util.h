// Shared fixture of the tdistrun end-to-end tests (tdistrun_test.cc,
// tdistrun_lifecycle_test.cc): each test fork+execs the real launcher with a controlled
// environment, its stdout and stderr going to files, and checks what the workers saw (the
// test programs write files) and what the user sees (exit code, console).
//
// The test process is a child subreaper, so whatever tdistrun leaves running when it exits
// becomes our child: "nothing is left" is checked as "this process has no children", and
// TearDown SIGKILLs and reaps any leftover before removing the test's temporary directory
// (also tdistrun's TMPDIR, so its run directories land there). Every wait is bounded.
// Test-only; the helpers run on the test's thread and own the processes they start.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/spawn.h"  // environment_without
#include "support/temp_dir.h"

namespace tdist::tdistrun_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::string kTdistrun = TDIST_TDISTRUN;
inline const std::string kBinDir = TDIST_TEST_BIN_DIR;
inline const std::string kEnvWorker = kBinDir + "/launcher_env_worker";
inline const std::string kFlakyWorker = kBinDir + "/launcher_flaky_worker";
inline const std::string kEchoWorker = kBinDir + "/launcher_echo_worker";
// Absolute (Ninja names sources relative to the build tree, so __FILE__ would be relative).
inline const fs::path kPyDir = fs::path(TDIST_TEST_SOURCE_DIR) / "py";

// A whole job normally takes well under a second; this only bounds a hang.
inline constexpr auto kJobLimit = 15s;

using test_support::read_file;

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

inline std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// "NAME=value" lines of an env_worker / env_printer.py report.
inline std::map<std::string, std::string> read_env_report(const fs::path& path) {
  std::map<std::string, std::string> vars;
  for (const std::string& line : split_lines(read_file(path))) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

// Alive = /proc/<pid> exists and is not a zombie.
inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// Our children right now (orphans of tdistrun arrive here: we are a subreaper).
inline std::vector<pid_t> children() {
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
inline bool no_children_within(Clock::duration limit) {
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

inline void kill_children() {
  for (int pass = 0; pass < 50 && !no_children_within(100ms); ++pass) {
    for (pid_t pid : children()) ::kill(pid, SIGKILL);
  }
}

// Waits until files <rank><suffix>, ranks 0..count-1, all exist in `dir`; false on timeout.
inline bool wait_for_rank_files(const fs::path& dir, const std::string& suffix, int count) {
  const auto deadline = Clock::now() + kJobLimit;
  auto all = [&] {
    for (int rank = 0; rank < count; ++rank) {
      if (!fs::exists(dir / (std::to_string(rank) + suffix))) return false;
    }
    return true;
  };
  while (!all()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Waits until `count` files <rank>.pid exist in `dir` (flaky_worker renames them into place)
// and returns their pids by rank; empty on timeout.
inline std::vector<pid_t> wait_for_pids(const fs::path& dir, int count) {
  if (!wait_for_rank_files(dir, ".pid", count)) return {};
  std::vector<pid_t> pids;
  for (int rank = 0; rank < count; ++rank) {
    pids.push_back(std::stoi(read_file(dir / (std::to_string(rank) + ".pid"))));
  }
  return pids;
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
inline std::vector<std::string> tdistrun(std::vector<std::string> args) {
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
  void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& names,
                      const std::vector<std::string>& extra_env = {}) {
    const Result r = run(args, extra_env);
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

}  // namespace tdist::tdistrun_test
