// algo_sweep: times every algorithm of all_reduce, broadcast and reduce over the real
// TCP transport between forked processes on this machine, to choose the thresholds in
// src/collectives/selection.cc. Not a test; run by hand:
//   algo_sweep [world=2] [max_bytes=67108864] [chunk_bytes...]
// Prints one line per (collective, algorithm, size): median microseconds and algbw.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "tdist/file_store.h"
#include "transport/tcp/tcp_comm.h"

namespace {

using namespace tdist;  // NOLINT(build/namespaces)

double median_us(coll::Collective c, coll::Algorithm a, transport::Comm& comm, uint64_t& seq,
                 size_t bytes) {
  const size_t count = std::max<size_t>(1, bytes / 4);
  std::vector<float> buf(count, 1.0f);
  std::vector<float> out(count);
  const int iters = bytes <= (1 << 16) ? 200 : bytes <= (1 << 22) ? 20 : 5;
  std::vector<double> times;
  for (int i = -2; i < iters; ++i) {
    // Line the ranks up first, so every rank times the same operation.
    coll::barrier(coll::Ctx{comm, seq++, Deadline::after(std::chrono::seconds(60))});
    const auto t0 = Clock::now();
    const coll::Ctx ctx{comm, seq++, Deadline::after(std::chrono::seconds(60))};
    switch (c) {
      case coll::Collective::kAllReduce:
        coll::all_reduce(ctx, buf.data(), buf.data(), count, DType::kF32, ReduceOpKind::kSum, a);
        break;
      case coll::Collective::kBroadcast:
        coll::broadcast(ctx, buf.data(), count * 4, 0, a);
        break;
      default:
        coll::reduce(ctx, buf.data(), out.data(), count, DType::kF32, ReduceOpKind::kSum, 0, a);
        break;
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 0) times.push_back(us);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void run_rank(int rank, int world, const std::string& path, size_t max_bytes) {
  auto store = std::make_shared<FileStore>(path, world);
  auto comm = transport::connect_tcp_comm(store, rank, world);
  uint64_t seq = 0;
  for (coll::Collective c :
       {coll::Collective::kAllReduce, coll::Collective::kBroadcast, coll::Collective::kReduce}) {
    for (size_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
      for (coll::Algorithm a : coll::algorithms_for(c)) {
        if (a == coll::Algorithm::kHierarchical) continue;  // one host here: not a choice
        const double us = median_us(c, a, *comm, seq, bytes);
        if (rank == 0) {
          std::printf("%-10s %-18s %10zu B %10.1f us %8.3f GB/s\n",
                      std::string(coll::collective_name(c)).c_str(),
                      std::string(coll::algorithm_name(a)).c_str(), bytes, us, bytes / us / 1e3);
          std::fflush(stdout);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{64} << 20;
  const std::string path = "/tmp/tdist_algo_sweep_" + std::to_string(getpid());
  std::vector<pid_t> children;
  for (int r = 1; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      run_rank(r, world, path, max_bytes);
      _exit(0);
    }
    children.push_back(pid);
  }
  run_rank(0, world, path, max_bytes);
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  unlink(path.c_str());
  return failed == 0 ? 0 : 1;
}
