// Measuring for algo_sweep (sweep_measure.h).
#include "collectives/sweep_measure.h"

#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "collectives/collectives.h"
#include "collectives/sweep_fit.h"
#include "tdist/file_store.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::coll::sweep {
namespace {

Ctx ctx_of(transport::Comm& comm, uint64_t& seq) {
  return Ctx{comm, seq++, Deadline::after(std::chrono::seconds(300))};
}

// The median over `iters` iterations of the slowest rank's microseconds (kBarrier: the
// two barriers alone).
double time_point(Collective c, Algorithm a, transport::Comm& comm, uint64_t& seq, size_t bytes,
                  int iters, float* buf, float* out) {
  const size_t count = bytes / 4;
  std::vector<double> times;
  for (int i = -1; i < iters; ++i) {  // one warm-up
    barrier(ctx_of(comm, seq));
    const auto t0 = Clock::now();
    const Ctx ctx = ctx_of(comm, seq);
    switch (c) {
      case Collective::kAllReduce:
        all_reduce(ctx, buf, buf, count, DType::kF32, ReduceOpKind::kSum, a);
        break;
      case Collective::kBroadcast:
        broadcast(ctx, buf, bytes, 0, a);
        break;
      case Collective::kReduce:
        reduce(ctx, buf, out, count, DType::kF32, ReduceOpKind::kSum, 0, a);
        break;
      default:
        break;
    }
    barrier(ctx_of(comm, seq));
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 0) times.push_back(us);
  }
  all_reduce(ctx_of(comm, seq), times.data(), times.data(), times.size(), DType::kF64,
             ReduceOpKind::kMax, Algorithm::kRecursiveDoubling);
  return median(times);
}

// One rank of one (transport, world): rank 0 writes "collective algorithm bytes us..."
// lines (one figure per round).
void run_rank(const Plan& plan, const std::string& kind, int world, int rank,
              const std::string& store_path, const std::string& out_path) {
  auto store = std::make_shared<FileStore>(store_path, world);
  std::unique_ptr<transport::Comm> comm = kind == "shm"
                                              ? transport::connect_shm_comm(store, rank, world)
                                              : transport::connect_tcp_comm(store, rank, world);
  const std::vector<size_t>& sizes = plan.sizes;
  std::vector<float> buf(sizes.back() / 4, 0.0f);
  std::vector<float> out(sizes.back() / 4, 0.0f);
  uint64_t seq = 0;
  // Warm up every path once (connections, poll budgets, page faults of the buffers).
  for (Collective c : kSwept) {
    for (Algorithm a : swept_algorithms(c, world)) {
      for (size_t bytes : {size_t{8}, sizes.back()}) {
        time_point(c, a, *comm, seq, bytes, bytes > (1 << 20) ? 1 : 50, buf.data(), out.data());
      }
    }
  }
  // rounds_us[{c, a, bytes}]: one median per round.
  std::map<std::tuple<int, int, size_t>, std::vector<double>> rounds_us;
  for (int round = 0; round < plan.rounds; ++round) {
    for (Collective c : kSwept) {
      const std::vector<Algorithm> algos = swept_algorithms(c, world);
      for (size_t bytes : sizes) {
        for (size_t i = 0; i < algos.size(); ++i) {
          const Algorithm a = algos[(i + static_cast<size_t>(round)) % algos.size()];
          const double us =
              time_point(c, a, *comm, seq, bytes, iterations(plan, bytes), buf.data(), out.data());
          rounds_us[{static_cast<int>(c), static_cast<int>(a), bytes}].push_back(us);
        }
      }
    }
    rounds_us[{static_cast<int>(Collective::kBarrier), static_cast<int>(Algorithm::kDissemination),
               0}]
        .push_back(time_point(Collective::kBarrier, Algorithm::kDissemination, *comm, seq, 0,
                              iterations(plan, 0), buf.data(), out.data()));
  }
  if (rank != 0) return;
  std::ofstream file(out_path);
  for (const auto& [key, us] : rounds_us) {
    const auto& [c, a, bytes] = key;
    file << collective_name(static_cast<Collective>(c)) << ' '
         << algorithm_name(static_cast<Algorithm>(a)) << ' ' << bytes;
    for (double u : us) file << ' ' << u;
    file << '\n';
  }
}

}  // namespace

std::vector<Algorithm> swept_algorithms(Collective c, int world) {
  std::vector<Algorithm> out;
  if (c == Collective::kAllReduce) {
    out = {Algorithm::kRecursiveDoubling, Algorithm::kHalvingDoubling, Algorithm::kRing};
    if (world == 2) out.erase(out.begin() + 1);
  } else {
    out = {Algorithm::kBinomial, Algorithm::kChain};
  }
  return out;
}

// Guards against an algorithm added to selection.h but not swept here.
void check_coverage() {
  for (Collective c : kSwept) {
    const std::vector<Algorithm> swept = swept_algorithms(c, 4);
    for (Algorithm a : algorithms_for(c)) {
      if (a != Algorithm::kHierarchical &&
          std::find(swept.begin(), swept.end(), a) == swept.end()) {
        throw std::runtime_error("algo_sweep does not time " + std::string(algorithm_name(a)) +
                                 " of " + std::string(collective_name(c)));
      }
    }
  }
}

int iterations(const Plan& plan, size_t bytes) {
  const int base = bytes <= (64 << 10)  ? 100
                   : bytes <= (1 << 20) ? 30
                   : bytes <= (8 << 20) ? 10
                                        : 5;
  return std::max(3, static_cast<int>(base * plan.iters_scale + 0.5));
}

void read_figures(std::istream& in, Figures& figures) {
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string c, a;
    size_t bytes = 0;
    if (!(fields >> c >> a >> bytes)) continue;
    std::vector<double>& rounds = figures[c + " " + a][bytes];
    for (double us = 0; fields >> us;) rounds.push_back(us);
  }
}

Figures run_world(const Plan& plan, const std::string& kind, int world, std::ostream* raw) {
  const std::string base =
      "/tmp/tdist_algo_sweep_" + std::to_string(getpid()) + "_" + kind + std::to_string(world);
  const std::string store_path = base + ".store";
  const std::string out_path = base + ".out";
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int status = 0;
      try {
        run_rank(plan, kind, world, r, store_path, out_path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "algo_sweep: %s world %d rank %d: %s\n", kind.c_str(), world, r,
                     e.what());
        status = 1;
      }
      std::fflush(stderr);
      _exit(status);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  unlink(store_path.c_str());
  if (failed > 0) {
    unlink(out_path.c_str());
    throw std::runtime_error(std::to_string(failed) + " rank(s) of " + kind + " world " +
                             std::to_string(world) + " failed");
  }
  Figures figures;
  std::ifstream file(out_path);
  for (std::string line; std::getline(file, line);) {
    std::istringstream one(line);
    read_figures(one, figures);
    if (raw != nullptr) *raw << kind << ' ' << world << ' ' << line << '\n';
  }
  unlink(out_path.c_str());
  return figures;
}

CpuTimes cpu_times() {
  CpuTimes t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  t.machine =
      (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  t.children = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  return t;
}

double other_cores(const CpuTimes& a, const CpuTimes& b, double wall) {
  return std::max(0.0, ((b.machine - a.machine) - (b.children - a.children)) / wall);
}

double wait_idle(double max_seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(max_seconds);
  double others = 0;
  do {
    const CpuTimes before = cpu_times();
    ::usleep(1000 * 1000);
    others = other_cores(before, cpu_times(), 1.0);
  } while (others >= 0.1 && Clock::now() < end);
  return others;
}

}  // namespace tdist::coll::sweep
