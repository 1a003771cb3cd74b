// Multi-process rendezvous: N real processes (rendezvous_worker) meet through env://
// (rank 0 hosting, or a launcher-style store hosted by this test), tcp:// and file://,
// and through init_process_group. Every test has its own deadline: children still
// running at it are killed, and the test fails saying which.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/test_util.h"
#include "support/spawn.h"
#include "tdist/prefix_store.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using rdzv_test::free_port;
using Env = std::map<std::string, std::string>;

constexpr int kWorld = 4;
constexpr auto kTestDeadline = std::chrono::seconds(30);

struct WorkerSpec {
  std::string mode = "rendezvous";
  std::string init_method;
  int rank = -1;  // passed as an argument; -1 leaves it to the URL or environment
  int world_size = -1;
  int expected_rank = 0;
  int rounds = 1;
  Env env;  // on top of this process's environment without the rendezvous variables
};

// Starts one worker. argv and envp are built before fork: the child only calls execve.
pid_t spawn(const WorkerSpec& w) {
  std::vector<std::string> args = {TDIST_RENDEZVOUS_WORKER,
                                   w.mode,
                                   w.init_method,
                                   std::to_string(w.rank),
                                   std::to_string(w.world_size),
                                   std::to_string(w.expected_rank),
                                   std::to_string(kWorld),
                                   std::to_string(w.rounds)};
  std::vector<std::string> envs = test_support::environment_without([](const std::string& name) {
    for (const std::string& v : rdzv_test::rendezvous_env_vars()) {
      if (v == name) return true;
    }
    return false;
  });
  Env env = w.env;
  env.emplace("TDIST_TIMEOUT", "20");
  for (const auto& [name, value] : env) envs.push_back(name + "=" + value);
  return test_support::spawn_exec(std::move(args), std::move(envs));
}

// Runs the workers until all exit or `limit` passes; leftovers are killed (SIGKILL) and
// reaped. Returns each worker's exit status, or -1 for one that was killed.
std::vector<int> run_workers_for(const std::vector<WorkerSpec>& workers, Clock::duration limit) {
  std::vector<pid_t> pids;
  for (const WorkerSpec& w : workers) {
    pid_t pid = spawn(w);
    EXPECT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  std::vector<int> exit_codes(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  auto deadline = Clock::now() + limit;
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (!done[i] && pids[i] > 0 && ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!done[i] && pids[i] > 0) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
    }
  }
  return exit_codes;
}

// Runs the workers and expects every one to exit 0 before the test's deadline.
void run_workers(const std::vector<WorkerSpec>& workers) {
  std::vector<int> codes = run_workers_for(workers, kTestDeadline);
  for (size_t i = 0; i < codes.size(); ++i) {
    EXPECT_EQ(codes[i], 0) << "worker for rank " << workers[i].expected_rank
                           << (codes[i] == -1 ? " did not finish in time and was killed"
                                              : " failed");
  }
}

Env master_env(uint16_t port) {
  return {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
}

std::vector<WorkerSpec> env_workers(const std::string& mode, uint16_t port, const Env& extra) {
  std::vector<WorkerSpec> workers;
  for (int rank = 0; rank < kWorld; ++rank) {
    WorkerSpec w;
    w.mode = mode;
    w.init_method = "env://";
    w.expected_rank = rank;
    w.env = master_env(port);
    w.env["RANK"] = std::to_string(rank);
    w.env["WORLD_SIZE"] = std::to_string(kWorld);
    for (const auto& [k, v] : extra) w.env[k] = v;
    workers.push_back(w);
  }
  return workers;
}

TEST(RendezvousMultiProcess, EnvWithRankZeroHosting) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  run_workers(env_workers("rendezvous", port, {}));
}

TEST(RendezvousMultiProcess, EnvWithMpiPmiAndSlurmVariables) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  const std::vector<std::pair<std::string, std::string>> chains = {
      {"RANK", "WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"}};
  std::vector<WorkerSpec> workers;
  for (int rank = 0; rank < kWorld; ++rank) {
    WorkerSpec w;
    w.init_method = "env://";
    w.expected_rank = rank;
    w.env = master_env(port);
    w.env[chains[rank].first] = std::to_string(rank);
    w.env[chains[rank].second] = std::to_string(kWorld);
    workers.push_back(w);
  }
  run_workers(workers);
}

TEST(RendezvousMultiProcess, EnvWithLauncherHostedStoreTwoRounds) {
  auto server = TCPStoreServer::start("0.0.0.0", 0);
  auto workers = env_workers("init", server->port(), {{"TDIST_USE_AGENT_STORE", "1"}});
  for (auto& w : workers) w.rounds = 2;  // init, destroy, init again on the same store
  run_workers(workers);
}

TEST(RendezvousMultiProcess, TorchelasticAgentStoreKeysLiveUnderTheAttempt) {
  auto server = TCPStoreServer::start("0.0.0.0", 0);
  auto workers =
      env_workers("rendezvous", server->port(),
                  {{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "3"}});
  for (auto& w : workers) w.rounds = 2;
  run_workers(workers);
  TCPStoreOptions options;
  options.port = server->port();
  options.connect_timeout = std::chrono::seconds(5);
  TCPStore client("127.0.0.1", options);
  EXPECT_EQ(client.add("/worker/attempt_3/tdist/rdzv/joining", 0), 2 * kWorld);
  EXPECT_TRUE(client.check({"/worker/attempt_3/tdist/pg/1/entry/0"}));
  EXPECT_FALSE(client.check({"tdist/rdzv/joining"}));
}

TEST(RendezvousMultiProcess, TcpUrlWithRankInUrlOrArgument) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  std::vector<WorkerSpec> workers;
  for (int rank = 0; rank < kWorld; ++rank) {
    WorkerSpec w;
    w.init_method = "tcp://127.0.0.1:" + std::to_string(port);
    if (rank % 2 == 0) {
      w.init_method += "?rank=" + std::to_string(rank) + "&world_size=" + std::to_string(kWorld);
    } else {
      w.rank = rank;
      w.world_size = kWorld;
    }
    w.expected_rank = rank;
    workers.push_back(w);
  }
  run_workers(workers);
}

TEST(RendezvousMultiProcess, TcpUrlOverIpv6Loopback) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  bool ipv6 = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) ::close(fd);
  if (!ipv6) GTEST_SKIP() << "no IPv6 loopback here";
  uint16_t port = free_port();
  std::vector<WorkerSpec> workers;
  for (int rank = 0; rank < kWorld; ++rank) {
    WorkerSpec w;
    w.init_method = "tcp://[::1]:" + std::to_string(port) + "?world_size=4";
    w.rank = rank;
    w.expected_rank = rank;
    workers.push_back(w);
  }
  run_workers(workers);
}

TEST(RendezvousMultiProcess, FileUrlThroughInitProcessGroup) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tdist_rdzv_" + std::to_string(::getpid()) + "_" +
              std::to_string(Clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  std::vector<WorkerSpec> workers;
  for (int rank = 0; rank < kWorld; ++rank) {
    WorkerSpec w;
    w.mode = "init";
    w.init_method = "file://" + (dir / "store").string() + "?world_size=4";
    w.rank = rank;
    w.expected_rank = rank;
    workers.push_back(w);
  }
  run_workers(workers);
  std::filesystem::remove_all(dir);
}

TEST(RendezvousMultiProcess, EnvThroughInitProcessGroup) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  run_workers(env_workers("init", port, {}));
}

TEST(RendezvousMultiProcess, DuplicateRankFailsEveryWorkerFast) {
  // The store outlives the workers here: with rank 0 hosting, a rank still connecting
  // when rank 0 fails and exits would retry until its timeout instead.
  auto server = TCPStoreServer::start("0.0.0.0", 0);
  auto workers = env_workers("rendezvous", server->port(), {{"TDIST_USE_AGENT_STORE", "1"}});
  workers[2].env["RANK"] = "1";  // ranks 0, 1, 1, 3
  auto start = Clock::now();
  std::vector<int> codes = run_workers_for(workers, kTestDeadline);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 1) << "worker " << i;
}

TEST(RendezvousMultiProcess, MissingRankTimesOutEveryWorker) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  auto workers = env_workers("rendezvous", port, {{"TDIST_TIMEOUT", "1"}});
  workers.pop_back();  // rank 3 never starts
  auto start = Clock::now();
  std::vector<int> codes = run_workers_for(workers, kTestDeadline);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 1) << "worker " << i;
}

TEST(RendezvousMultiProcess, HarnessKillsWorkersPastTheDeadline) {
  uint16_t port = free_port();
  ASSERT_NE(port, 0);
  auto workers = env_workers("rendezvous", port, {});
  workers.resize(1);  // rank 0 of 4 waits (TDIST_TIMEOUT=20 s) for ranks that never come
  auto start = Clock::now();
  std::vector<int> codes = run_workers_for(workers, std::chrono::milliseconds(500));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(codes[0], -1);
}

}  // namespace
}  // namespace tdist
