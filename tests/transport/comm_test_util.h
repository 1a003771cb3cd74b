// Helpers for the transport tests, independent of any transport: running N ranks as
// threads over one HashStore, running ranks as forked processes over a FileStore, byte
// patterns, and catching the message of an expected exception. Test-only.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/error_of.h"
#include "tdist/hash_store.h"
#include "transport/comm.h"

namespace tdist::transport::testing {

inline constexpr auto kSetupTimeout = std::chrono::seconds(20);

// Connects rank r of `world` through `store` with some transport.
using ConnectFn =
    std::function<std::unique_ptr<Comm>(std::shared_ptr<Store> store, int rank, int world)>;

// Runs body(comm) on `world` threads, one per rank, each with its own Comm from `connect`;
// rethrows the first exception a rank threw (after every thread finished).
inline void run_comm_ranks(int world, const ConnectFn& connect,
                           const std::function<void(Comm&)>& body) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(store, r, world);
        body(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A deterministic byte pattern for (seed, index).
inline std::vector<uint8_t> pattern(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

using test_support::error_of;

// Runs body() in a forked child process (call it while this process has no other
// threads); its return value is the exit code (99 on an exception). A child that hangs
// is ended by SIGALRM after 50 s.
inline pid_t fork_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::alarm(50);
  int code = 99;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  std::fflush(nullptr);
  ::_exit(code);
}

// Waits for every child; returns their exit codes (-signal when killed by a signal).
inline std::vector<int> wait_children(const std::vector<pid_t>& pids) {
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  return codes;
}

// A fresh path for a FileStore shared by forked ranks, removed with the object.
class StorePath {
 public:
  StorePath() {
    char dir[] = "/tmp/tdist_comm_test_XXXXXX";
    if (::mkdtemp(dir) != nullptr) dir_ = dir;
  }
  ~StorePath() {
    std::remove(path().c_str());
    ::rmdir(dir_.c_str());
  }
  StorePath(const StorePath&) = delete;
  StorePath& operator=(const StorePath&) = delete;
  std::string path() const { return dir_ + "/store"; }

 private:
  std::string dir_;
};

}  // namespace tdist::transport::testing
