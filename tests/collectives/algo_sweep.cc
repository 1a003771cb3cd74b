// algo_sweep: times every flat algorithm of all_reduce, broadcast and reduce over the real
// transports (tcp and shm) between forked processes on this machine, and proposes the
// thresholds of src/collectives/selection.cc. Not a test; scripts/sweep_algorithms.sh
// runs it. Usage (every flag optional; sizes take K and M suffixes, powers of 1024):
//   algo_sweep [--transports tcp,shm] [--worlds 2,3,4] [--min-bytes 8] [--max-bytes 64M]
//              [--factor 2] [--rounds 3] [--iters-scale 1] [--margin 0.1]
// For each transport and world, `world` processes connect through a FileStore and, in
// each of `rounds` rounds, time every (collective, size, algorithm) for a number of
// iterations that falls with the size (times iters-scale), the order of the algorithms
// rotating from round to round. One iteration: a barrier, then the collective (in place,
// zeros, f32, sum, root 0); its time is the slowest rank's. A point's figure is the median
// of its rounds' medians. Prints, per transport and world, a table of the figures with
// the fastest algorithm and selection.cc's current choice marked, the fitted crossovers
// (sweep_fit.h: differences within `margin` count as ties), and at the end the proposed
// tables in selection.cc's form. Exit status 1 when a rank failed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/sweep_fit.h"
#include "tdist/file_store.h"
#include "tdist/settings.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace {

using namespace tdist;  // NOLINT(build/namespaces)
using coll::Algorithm;
using coll::Collective;
namespace sweep = coll::sweep;

struct Options {
  std::vector<std::string> transports = {"tcp", "shm"};
  std::vector<int> worlds = {2, 3, 4};
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  size_t factor = 2;
  int rounds = 3;
  double iters_scale = 1.0;
  double margin = 0.10;
};

constexpr Collective kSwept[] = {Collective::kAllReduce, Collective::kBroadcast,
                                 Collective::kReduce};

// The flat algorithms of `c` in the order selection.cc uses them by size (the latency one
// first). With 2 ranks, halving-doubling is the ring's exchange (all_reduce.cc), so only
// the ring is timed.
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
    for (Algorithm a : coll::algorithms_for(c)) {
      if (a != Algorithm::kHierarchical &&
          std::find(swept.begin(), swept.end(), a) == swept.end()) {
        throw std::runtime_error("algo_sweep does not time " +
                                 std::string(coll::algorithm_name(a)) + " of " +
                                 std::string(coll::collective_name(c)));
      }
    }
  }
}

std::vector<size_t> sweep_sizes(const Options& o) {
  std::vector<size_t> out;
  for (size_t b = std::max<size_t>(4, o.min_bytes / 4 * 4); b <= o.max_bytes; b *= o.factor) {
    out.push_back(b);
  }
  if (out.empty() || out.back() != o.max_bytes / 4 * 4) out.push_back(o.max_bytes / 4 * 4);
  return out;
}

int iterations(const Options& o, size_t bytes) {
  const int base = bytes <= (64 << 10)  ? 100
                   : bytes <= (1 << 20) ? 30
                   : bytes <= (8 << 20) ? 10
                                        : 5;
  return std::max(3, static_cast<int>(base * o.iters_scale + 0.5));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

coll::Ctx ctx_of(transport::Comm& comm, uint64_t& seq) {
  return coll::Ctx{comm, seq++, Deadline::after(std::chrono::seconds(300))};
}

// The median over `iters` iterations of the slowest rank's microseconds.
double time_point(Collective c, Algorithm a, transport::Comm& comm, uint64_t& seq, size_t bytes,
                  int iters, float* buf, float* out) {
  const size_t count = bytes / 4;
  std::vector<double> times;
  for (int i = -1; i < iters; ++i) {  // one warm-up
    coll::barrier(ctx_of(comm, seq));
    const auto t0 = Clock::now();
    const coll::Ctx ctx = ctx_of(comm, seq);
    switch (c) {
      case Collective::kAllReduce:
        coll::all_reduce(ctx, buf, buf, count, DType::kF32, ReduceOpKind::kSum, a);
        break;
      case Collective::kBroadcast:
        coll::broadcast(ctx, buf, bytes, 0, a);
        break;
      default:
        coll::reduce(ctx, buf, out, count, DType::kF32, ReduceOpKind::kSum, 0, a);
        break;
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 0) times.push_back(us);
  }
  coll::all_reduce(ctx_of(comm, seq), times.data(), times.data(), times.size(), DType::kF64,
                   ReduceOpKind::kMax, Algorithm::kRecursiveDoubling);
  return median(times);
}

// One rank of one (transport, world): rank 0 writes "collective algorithm bytes us" lines.
void run_rank(const Options& o, const std::string& kind, int world, int rank,
              const std::string& store_path, const std::string& out_path) {
  auto store = std::make_shared<FileStore>(store_path, world);
  std::unique_ptr<transport::Comm> comm = kind == "shm"
                                              ? transport::connect_shm_comm(store, rank, world)
                                              : transport::connect_tcp_comm(store, rank, world);
  const std::vector<size_t> sizes = sweep_sizes(o);
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
  for (int round = 0; round < o.rounds; ++round) {
    for (Collective c : kSwept) {
      const std::vector<Algorithm> algos = swept_algorithms(c, world);
      for (size_t bytes : sizes) {
        for (size_t i = 0; i < algos.size(); ++i) {
          const Algorithm a = algos[(i + static_cast<size_t>(round)) % algos.size()];
          const double us =
              time_point(c, a, *comm, seq, bytes, iterations(o, bytes), buf.data(), out.data());
          rounds_us[{static_cast<int>(c), static_cast<int>(a), bytes}].push_back(us);
        }
      }
    }
  }
  if (rank != 0) return;
  std::ofstream file(out_path);
  for (const auto& [key, us] : rounds_us) {
    const auto& [c, a, bytes] = key;
    file << coll::collective_name(static_cast<Collective>(c)) << ' '
         << coll::algorithm_name(static_cast<Algorithm>(a)) << ' ' << bytes << ' ' << median(us)
         << '\n';
  }
}

// Forks `world` ranks over `kind`; the figures by "collective algorithm" and bytes.
std::map<std::string, std::map<size_t, double>> run_world(const Options& o, const std::string& kind,
                                                          int world) {
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
        run_rank(o, kind, world, r, store_path, out_path);
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
  std::map<std::string, std::map<size_t, double>> figures;
  std::ifstream file(out_path);
  std::string c, a;
  size_t bytes = 0;
  double us = 0;
  while (file >> c >> a >> bytes >> us) figures[c + " " + a][bytes] = us;
  unlink(out_path.c_str());
  return figures;
}

// The proposed thresholds of one (transport, world), as selection.cc's Thresholds.
struct Proposal {
  size_t recursive_doubling = 0, halving_doubling = 0, broadcast_binomial = 0, reduce_binomial = 0;
};

// Prints one collective's table and crossovers; returns the fitted thresholds (bytes up to
// which each algorithm but the last runs).
std::vector<size_t> report(const Options& o, Collective c, int world, transport::LinkClass link,
                           const std::map<std::string, std::map<size_t, double>>& figures) {
  const std::vector<size_t> sizes = sweep_sizes(o);
  const std::vector<Algorithm> algos = swept_algorithms(c, world);
  const std::string cname(coll::collective_name(c));
  std::vector<std::vector<double>> times;
  std::printf("%-14s", cname.c_str());
  for (Algorithm a : algos) std::printf(" %19s", std::string(coll::algorithm_name(a)).c_str());
  std::printf("   (us; * fastest, > selection.cc today)\n");
  for (Algorithm a : algos) {
    const auto& row = figures.at(cname + " " + std::string(coll::algorithm_name(a)));
    times.emplace_back();
    for (size_t bytes : sizes) times.back().push_back(row.at(bytes));
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    size_t fastest = 0;
    for (size_t a = 1; a < algos.size(); ++a) {
      if (times[a][s] < times[fastest][s]) fastest = a;
    }
    Algorithm today = coll::select_algorithm(c, sizes[s], world, 1, link);
    if (world == 2 && today == Algorithm::kHalvingDoubling) today = Algorithm::kRing;
    std::printf("%14s", sweep::human_bytes(sizes[s]).c_str());
    for (size_t a = 0; a < algos.size(); ++a) {
      std::printf(" %c%c%16.1f", algos[a] == today ? '>' : ' ', a == fastest ? '*' : ' ',
                  times[a][s]);
    }
    std::printf("\n");
  }
  const sweep::Fit fit = sweep::fit_cuts(times, o.margin);
  std::vector<size_t> bounds;
  std::printf("  crossovers:");
  for (size_t i = 0; i < fit.cuts.size(); ++i) {
    bounds.push_back(sweep::cut_bytes(sizes, fit.cuts[i]));
    const size_t b = bounds.back();
    std::printf("%s %s %s%s", i == 0 ? "" : ",",
                std::string(coll::algorithm_name(algos[i])).c_str(),
                b == 0 || b == SIZE_MAX ? "" : "up to ", sweep::human_bytes(b).c_str());
  }
  std::printf(", %s above (loss %.2f)\n\n", std::string(coll::algorithm_name(algos.back())).c_str(),
              fit.loss);
  return bounds;
}

size_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  const unsigned long long value = std::stoull(text, &pos);
  const std::string suffix = text.substr(pos);
  if (suffix.empty()) return value;
  if (suffix[0] == 'K' || suffix[0] == 'k') return value << 10;
  if (suffix[0] == 'M' || suffix[0] == 'm') return value << 20;
  throw std::invalid_argument("bad size " + text);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument(flag + " needs a value");
    }
    if (flag == "--transports") {
      o.transports = split(value);
      for (const auto& t : o.transports) {
        if (t != "tcp" && t != "shm") throw std::invalid_argument("unknown transport " + t);
      }
    } else if (flag == "--worlds") {
      o.worlds.clear();
      for (const auto& w : split(value)) o.worlds.push_back(std::stoi(w));
      for (int w : o.worlds) {
        if (w < 2 || w > 64) throw std::invalid_argument("world " + std::to_string(w));
      }
    } else if (flag == "--min-bytes") {
      o.min_bytes = parse_bytes(value);
    } else if (flag == "--max-bytes") {
      o.max_bytes = parse_bytes(value);
    } else if (flag == "--factor") {
      o.factor = std::stoul(value);
    } else if (flag == "--rounds") {
      o.rounds = std::stoi(value);
    } else if (flag == "--iters-scale") {
      o.iters_scale = std::stod(value);
    } else if (flag == "--margin") {
      o.margin = std::stod(value);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (o.factor < 2 || o.rounds < 1 || o.iters_scale <= 0 || o.max_bytes < 4 ||
      o.min_bytes > o.max_bytes) {
    throw std::invalid_argument(
        "need --factor >= 2, --rounds >= 1, --iters-scale > 0, "
        "4 <= --max-bytes, --min-bytes <= --max-bytes");
  }
  return o;
}

// The 1-minute load average (other work on the machine skews the figures).
double load_average() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

void print_header(const Options& o) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char date[64] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf(
      "algo_sweep %s on %s, %ld online cpus; TDIST_CHUNK_BYTES=%lld "
      "TDIST_SHM_RING_BYTES=%lld TDIST_POLL_US=%lld; sizes %s..%s x%zu, %d rounds, "
      "iters x%.2f, margin %.0f%%\n\n",
      date, host, sysconf(_SC_NPROCESSORS_ONLN),
      static_cast<long long>(setting_int("TDIST_CHUNK_BYTES")),
      static_cast<long long>(setting_int("TDIST_SHM_RING_BYTES")),
      static_cast<long long>(setting_int("TDIST_POLL_US")),
      sweep::human_bytes(sweep_sizes(o).front()).c_str(),
      sweep::human_bytes(sweep_sizes(o).back()).c_str(), o.factor, o.rounds, o.iters_scale,
      o.margin * 100);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    check_coverage();
    const Options o = parse(argc, argv);
    print_header(o);
    std::map<std::string, std::map<int, Proposal>> proposals;
    for (const std::string& kind : o.transports) {
      const auto link = kind == "shm" ? transport::LinkClass::kShm : transport::LinkClass::kTcp;
      for (int world : o.worlds) {
        const auto start = Clock::now();
        const double load_before = load_average();
        const auto figures = run_world(o, kind, world);
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        std::printf("== %s, world %d (%.0f s; load average %.2f before, %.2f after)\n",
                    kind.c_str(), world, secs, load_before, load_average());
        Proposal& p = proposals[kind][world];
        const std::vector<size_t> ar = report(o, Collective::kAllReduce, world, link, figures);
        p.recursive_doubling = ar[0];
        p.halving_doubling = ar.back();  // world 2: none (the ring is the same exchange)
        p.broadcast_binomial = report(o, Collective::kBroadcast, world, link, figures)[0];
        p.reduce_binomial = report(o, Collective::kReduce, world, link, figures)[0];
        std::fflush(stdout);
      }
    }
    std::printf(
        "Proposed tables for src/collectives/selection.cc ({recursive_doubling, "
        "halving_doubling, broadcast_binomial, reduce_binomial}: bytes up to which "
        "each runs):\n");
    for (const auto& [kind, by_world] : proposals) {
      std::printf("constexpr Thresholds k%sTable[] = {\n", kind == "shm" ? "Shm" : "Tcp");
      for (const auto& [world, p] : by_world) {
        std::printf("    {%s, %s, %s, %s},  // world %d\n",
                    sweep::code_bytes(p.recursive_doubling).c_str(),
                    sweep::code_bytes(p.halving_doubling).c_str(),
                    sweep::code_bytes(p.broadcast_binomial).c_str(),
                    sweep::code_bytes(p.reduce_binomial).c_str(), world);
      }
      std::printf("};\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "algo_sweep: %s\n", e.what());
    return 1;
  }
}
