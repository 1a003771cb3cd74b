// store_scale_bench: how long N TCPStore clients take to meet at a barrier.
//
// Starts a TCPStoreServer, then forks P processes that each open N/P client connections
// one after another. Every client connects and adds 1 to a counter; the client whose add
// returns N sets a "done" key; then every client waits for "done". Prints the wall time
// from the first connect to the last client released (the figure torch's TCPStore
// benchmarks quote: ~2 s for 4096 clients with its libuv server).
//
//   store_scale_bench [--clients N] [--procs P] [--repeat R]     (4096, 8 and 3 by default)
//
// Raises RLIMIT_NOFILE as far as it can (the hard limit too when run as root). Exits 1
// when a client fails or a child does not finish within 120 s, 2 on a bad command line.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cli/cli.h"
#include "tdist/error.h"
#include "tdist/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int clients = 4096;
  int procs = 8;
  int repeat = 3;
};

struct ChildReport {
  int64_t first_connect_ns = 0;  // steady clock, comparable across processes
  int64_t released_ns = 0;
  int64_t slowest_join_ns = 0;  // the longest connect + add of one client
  int32_t ok = 0;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void raise_fd_limit(rlim_t needed) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= needed) return;
  if (rl.rlim_max < needed) rl.rlim_max = needed;  // allowed for root only
  rl.rlim_cur = needed;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    std::fprintf(stderr, "warning: open-file limit is %llu, %llu wanted\n",
                 static_cast<unsigned long long>(rl.rlim_cur),
                 static_cast<unsigned long long>(needed));
  }
}

// One child: `count` clients, connected one after another, then all waiting.
ChildReport run_child(uint16_t port, int count, int total) {
  ChildReport report;
  tdist::TCPStoreOptions o;
  o.port = port;
  o.timeout = std::chrono::seconds(60);
  o.connect_timeout = std::chrono::seconds(60);
  std::vector<std::unique_ptr<tdist::TCPStore>> clients;
  clients.reserve(static_cast<size_t>(count));
  try {
    report.first_connect_ns = now_ns();
    for (int i = 0; i < count; ++i) {
      const int64_t join_start = now_ns();
      clients.push_back(std::make_unique<tdist::TCPStore>("127.0.0.1", o));
      if (clients.back()->add("barrier", 1) == total) clients.back()->set("done", "1");
      report.slowest_join_ns = std::max(report.slowest_join_ns, now_ns() - join_start);
    }
    for (auto& c : clients) c->wait({"done"});
    report.released_ns = now_ns();
    report.ok = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "client failed: %s\n", e.what());
  }
  return report;
}

struct RunResult {
  double seconds = -1;  // negative on failure
  double slowest_join_ms = 0;
};

// One barrier of opts.clients clients.
RunResult run_once(const Options& opts) {
  auto server = tdist::TCPStoreServer::start("127.0.0.1", 0);
  const uint16_t port = server->port();
  int go[2];
  int results[2];
  RunResult result;
  if (::pipe(go) != 0 || ::pipe(results) != 0) return result;
  std::vector<pid_t> children;
  for (int p = 0; p < opts.procs; ++p) {
    int count = opts.clients / opts.procs + (p < opts.clients % opts.procs ? 1 : 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(120);
      ::close(go[1]);
      char byte;
      if (::read(go[0], &byte, 1) < 0) ::_exit(2);  // EOF when the parent lets go
      ChildReport r = run_child(port, count, opts.clients);
      ssize_t n = ::write(results[1], &r, sizeof(r));
      ::_exit(n == sizeof(r) && r.ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // releases every child at once
  ::close(results[1]);
  int64_t first = INT64_MAX;
  int64_t last = 0;
  bool ok = true;
  for (size_t i = 0; i < children.size(); ++i) {
    ChildReport r;
    if (::read(results[0], &r, sizeof(r)) != sizeof(r) || !r.ok) {
      ok = false;
      break;
    }
    first = std::min(first, r.first_connect_ns);
    last = std::max(last, r.released_ns);
    result.slowest_join_ms = std::max(result.slowest_join_ms, r.slowest_join_ns / 1e6);
  }
  ::close(results[0]);
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (ok) result.seconds = static_cast<double>(last - first) / 1e9;
  return result;
}

// The command line into `opts` (CLI11's typed options and help); -1 to run, else the exit
// status.
int parse(int argc, char** argv, Options& opts) {
  const std::string usage =
      std::string("usage: ") + argv[0] + " [--clients N] [--procs P] [--repeat R]\n";
  CLI::App app{"N TCPStore clients meeting at a barrier; prints the wall time.", argv[0]};
  for (auto [name, field, what] :
       {std::tuple{"--clients", &opts.clients, "store clients (connections) in all"},
        std::tuple{"--procs", &opts.procs, "processes that open them"},
        std::tuple{"--repeat", &opts.repeat, "barriers; the best one is reported"}}) {
    app.add_option(name, *field, what)
        ->check(CLI::Range(1, 1 << 20).description(""))
        ->type_name("N")
        ->capture_default_str();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return tdist::cli::print_help(stdout, app.help());
  } catch (const CLI::ParseError& e) {
    return tdist::cli::usage_error("store_scale_bench", e.what(), usage);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  if (int status = parse(argc, argv, opts); status >= 0) return status;
  opts.procs = std::min(opts.procs, opts.clients);
  raise_fd_limit(static_cast<rlim_t>(opts.clients) + 256);
  std::printf("TCPStore barrier: %d clients in %d processes\n", opts.clients, opts.procs);
  double best = 1e30;
  for (int r = 0; r < opts.repeat; ++r) {
    RunResult run = run_once(opts);
    double secs = run.seconds;
    if (secs < 0) {
      std::fprintf(stderr, "run %d failed\n", r);
      return 1;
    }
    best = std::min(best, secs);
    std::printf("run %d: %.3f s from first connect to all released (slowest connect+add %.1f ms)\n",
                r, secs, run.slowest_join_ms);
  }
  std::printf("best: %.3f s\n", best);
  return 0;
}
