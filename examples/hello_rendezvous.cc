// hello_rendezvous: processes meet through the store and agree on who is who.
//
//   hello_rendezvous --nproc N     spawns N local processes itself, hosting the store the
//                                  way a launcher does (TDIST_USE_AGENT_STORE=1)
//   hello_rendezvous               under a launcher or mpirun: reads env:// as it finds it
//
// Each rank joins with rendezvous("env://"), publishes "host:pid", reads everyone's, and
// rank 0 prints the roster. Exit status is non-zero if any rank failed.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/rendezvous.h"
#include "tdist/tcp_store.h"

namespace {

using Ms = std::chrono::milliseconds;

int run_rank() {
  auto t0 = std::chrono::steady_clock::now();
  tdist::RendezvousResult rdzv = tdist::rendezvous("env://", -1, -1, Ms(60'000));
  auto joined = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);

  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string me = std::string(host) + ":" + std::to_string(getpid());
  rdzv.store->set("hello/" + std::to_string(rdzv.rank), me);

  std::vector<std::string> keys;
  for (int r = 0; r < rdzv.world_size; ++r) keys.push_back("hello/" + std::to_string(r));
  std::vector<tdist::Bytes> all = rdzv.store->multi_get(keys);

  // Everyone must see the same roster: count agreement with a store counter.
  rdzv.store->add("hello/seen", static_cast<int64_t>(all.size()));
  if (rdzv.store->add("hello/done", 1) == rdzv.world_size) rdzv.store->set("hello/all_done", "1");
  rdzv.store->wait({"hello/all_done"});
  int64_t seen = rdzv.store->add("hello/seen", 0);

  if (rdzv.rank == 0) {
    std::printf("%d processes met through the store (rank 0 joined in %.1f ms)\n", rdzv.world_size,
                joined.count());
    for (int r = 0; r < rdzv.world_size; ++r) {
      std::printf("  rank %d: %s\n", r, tdist::to_string(all[static_cast<size_t>(r)]).c_str());
    }
    bool agree = seen == static_cast<int64_t>(rdzv.world_size) * rdzv.world_size;
    std::printf("roster agreed by all ranks: %s\n", agree ? "yes" : "NO");
    return agree ? 0 : 1;
  }
  return 0;
}

int spawn(int nproc) {
  auto server = tdist::TCPStoreServer::start("127.0.0.1", 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(server->port()).c_str(), 1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("TDIST_USE_AGENT_STORE", "1", 1);
      int rc = 1;
      try {
        rc = run_rank();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) std::fprintf(stderr, "%d of %d processes failed\n", failed, nproc);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--nproc") == 0 && i + 1 < argc) {
      nproc = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--nproc N]\n", argv[0]);
      return 2;
    }
  }
  try {
    return nproc > 0 ? spawn(nproc) : run_rank();
  } catch (const tdist::Error& e) {
    std::fprintf(stderr, "hello_rendezvous: %s\n", e.what());
    return 1;
  }
}
