// Running a test binary as the ranks of one job on this host, as the GPU tests do: each
// rank is this program (/proc/self/exe) started with its own arguments and LOCAL_RANK, so
// that it picks its device as under a launcher. Test-only.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/spawn.h"

namespace tdist::test_support {

// Starts `world` ranks: rank r runs /proc/self/exe with args(r, store_path), where
// store_path is a file-store path in a fresh temporary folder shared by the ranks, and
// with this process's environment minus LOCAL_RANK, TDIST_LOCAL_RANK and
// TDIST_NCCL_DEVICE, plus LOCAL_RANK=r. Waits for all of them; past `limit`, kills every
// rank still running. Returns each rank's wait status, or -1 for a rank that was not
// started or was killed at the deadline. The folder is removed before returning.
inline std::vector<int> run_local_ranks(
    int world, const std::function<std::vector<std::string>(int, const std::string&)>& args,
    std::chrono::seconds limit) {
  std::vector<int> statuses(static_cast<size_t>(world), -1);
  char dir_template[] = "/tmp/tdist_local_ranks_XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return statuses;
  const std::string store_path = std::string(dir_template) + "/store";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = environment_without([](const std::string& name) {
      return name == "LOCAL_RANK" || name == "TDIST_LOCAL_RANK" || name == "TDIST_NCCL_DEVICE";
    });
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    std::vector<std::string> argv = args(r, store_path);
    argv.insert(argv.begin(), "/proc/self/exe");
    pids.push_back(spawn_exec(std::move(argv), std::move(env)));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < world; ++r) {
    if (pids[r] <= 0) continue;
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) {
          if (p > 0) ::kill(p, SIGKILL);
        }
        ::waitpid(pids[r], &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    statuses[r] = status;
  }
  std::remove(store_path.c_str());
  ::rmdir(dir_template);
  return statuses;
}

// Whether a status from run_local_ranks is a normal exit with code 0.
inline bool exited_zero(int status) {
  return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace tdist::test_support
