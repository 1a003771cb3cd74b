// tdist-bench --nproc: spawning, watching and stopping local ranks (see spawn.h).
#include "tdist_bench/spawn.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tdist/tcp_store.h"

extern char** environ;

namespace tdist_bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(10);
constexpr auto kTermGrace = std::chrono::seconds(3);

// The variables a child gets on top of (and instead of) the parent's environment.
std::vector<std::string> child_environment(int rank, int nproc, uint16_t port) {
  const std::vector<std::pair<std::string, std::string>> own = {
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(nproc)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"GROUP_RANK", "0"},
      {"TDIST_USE_AGENT_STORE", "1"},
      {"OMP_NUM_THREADS", "1"},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : own) {
      if (entry.starts_with(name) && entry.size() > name.size() && entry[name.size()] == '=') {
        replaced = true;
      }
    }
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : own) env.push_back(name + "=" + value);
  return env;
}

// argv without "--nproc N" / "--nproc=N": the children run as ranks.
std::vector<std::string> child_arguments(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i > 0 && arg == "--nproc") {
      ++i;
      continue;
    }
    if (i > 0 && arg.starts_with("--nproc=")) continue;
    args.emplace_back(arg);
  }
  return args;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

struct Child {
  pid_t pid = -1;
  bool running = false;
};

// Reaps whatever has ended; returns the index of the first child that failed, or -1.
int reap(std::vector<Child>& children, int& failed_status) {
  int failed = -1;
  for (size_t r = 0; r < children.size(); ++r) {
    Child& c = children[r];
    if (!c.running) continue;
    int status = 0;
    pid_t got = ::waitpid(c.pid, &status, WNOHANG);
    if (got != c.pid) continue;
    c.running = false;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (failed < 0) {
        failed = static_cast<int>(r);
        failed_status = status;
      }
    }
  }
  return failed;
}

bool any_running(const std::vector<Child>& children) {
  for (const Child& c : children) {
    if (c.running) return true;
  }
  return false;
}

// SIGTERM to every running child, SIGKILL to those still running after the grace period.
void stop_all(std::vector<Child>& children) {
  for (const Child& c : children) {
    if (c.running) ::kill(c.pid, SIGTERM);
  }
  int ignored = 0;
  const auto kill_at = Clock::now() + kTermGrace;
  while (any_running(children) && Clock::now() < kill_at) {
    reap(children, ignored);
    std::this_thread::sleep_for(kPollInterval);
  }
  for (Child& c : children) {
    if (!c.running) continue;
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
    c.running = false;
  }
}

// Waits for every child until `deadline`, sleeping in sigtimedwait between SIGCHLDs.
int watch(std::vector<Child>& children, Clock::time_point deadline,
          std::chrono::milliseconds timeout, const sigset_t& sigchld) {
  while (any_running(children)) {
    int status = 0;
    int failed = reap(children, status);
    if (failed >= 0) {
      std::fprintf(stderr, "tdist-bench: rank %d (pid %d) %s; stopping the other ranks\n", failed,
                   static_cast<int>(children[static_cast<size_t>(failed)].pid),
                   describe(status).c_str());
      stop_all(children);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    if (!any_running(children)) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      std::fprintf(stderr,
                   "tdist-bench: the ranks did not finish within --timeout %lld s; stopping them\n",
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
      stop_all(children);
      return 1;
    }
    // Wake on SIGCHLD, or after a second at most (a SIGCHLD may merge with an earlier one).
    auto wait = std::min<Clock::duration>(deadline - now, std::chrono::seconds(1));
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    ::sigtimedwait(&sigchld, nullptr, &ts);
  }
  return 0;
}

}  // namespace

int spawn_local(int argc, const char* const* argv, const Options& options) {
  const int nproc = options.nproc;
  std::unique_ptr<tdist::TCPStoreServer> server = tdist::TCPStoreServer::start("127.0.0.1", 0);

  // Everything a child needs is built before fork: between fork and execve the child
  // only makes system calls (the store server's thread exists in the parent only).
  std::vector<std::string> args = child_arguments(argc, argv);
  std::vector<char*> arg_ptrs = pointers(args);
  std::vector<std::vector<std::string>> envs;
  std::vector<std::vector<char*>> env_ptrs;
  for (int r = 0; r < nproc; ++r) envs.push_back(child_environment(r, nproc, server->port()));
  for (auto& env : envs) env_ptrs.push_back(pointers(env));
  const pid_t parent = ::getpid();
  // SIGCHLD stays blocked in the parent so that sigtimedwait() can sleep until a child
  // ends (no polling); children unblock it before execve.
  sigset_t sigchld;
  sigemptyset(&sigchld);
  sigaddset(&sigchld, SIGCHLD);
  sigset_t old_mask;
  ::sigprocmask(SIG_BLOCK, &sigchld, &old_mask);
  std::fflush(stdout);
  std::fflush(stderr);

  // The CPUs of this process's mask, for --bind core (as mpirun binds by default): when
  // every rank can have its own, rank r gets the r-th; the scheduler otherwise may keep
  // two polling ranks on one CPU for a long time.
  std::vector<int> cpus;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (options.bind && ::sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  if (cpus.size() < static_cast<size_t>(nproc)) cpus.clear();
  std::vector<Child> children(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("tdist-bench: fork");
      stop_all(children);
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent is already gone
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      if (!cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(r)], &one);
        ::sched_setaffinity(0, sizeof(one), &one);  // best effort
      }
      ::execve("/proc/self/exe", arg_ptrs.data(), env_ptrs[static_cast<size_t>(r)].data());
      static const char kMsg[] = "tdist-bench: execve(/proc/self/exe) failed\n";
      ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
      (void)ignored;
      ::_exit(127);
    }
    children[static_cast<size_t>(r)] = Child{pid, true};
  }

  const int rc = watch(children, Clock::now() + options.timeout, options.timeout, sigchld);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  return rc;
}

}  // namespace tdist_bench
