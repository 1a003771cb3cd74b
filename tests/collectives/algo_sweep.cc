// algo_sweep: times every flat algorithm of all_reduce, broadcast and reduce over the real
// transports (tcp and shm) between forked processes on this machine, and proposes the
// thresholds of src/collectives/selection.cc. Not a test; scripts/sweep_algorithms.sh
// runs it. Usage (every flag optional; sizes take K and M suffixes, powers of 1024):
//   algo_sweep [--transports tcp,shm] [--worlds 2,3,4] [--min-bytes 8] [--max-bytes 64M]
//              [--factor 2] [--rounds 3] [--iters-scale 1] [--margin 0.1] [--wait-idle 0]
//              [--raw FILE] [--from-raw FILE]
// For each transport and world, sweep_measure.h's run_world() times every point (sizes
// from --min-bytes to --max-bytes by --factor; each figure includes a barrier). A point's
// figure is the median of its rounds' medians. Prints, per transport and world, a table
// of the figures with the fastest algorithm and selection.cc's current choice marked,
// the fitted crossovers (sweep_fit.h: differences within `margin` in most rounds count as
// ties, and ties keep today's choice), and at the end the proposed tables in
// selection.cc's form. Other processes on the machine skew the figures (two polling ranks
// sharing a core with a compiler hand over only when one yields): each run reports the
// cores other processes used meanwhile, and --wait-idle S first waits up to S seconds for
// an idle second. --raw FILE keeps every round's figures; --from-raw FILE analyzes such a
// file again (another --margin, say) instead of measuring. Exit status 1 when a rank
// failed or a flag is bad.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "collectives/selection.h"
#include "collectives/sweep_fit.h"
#include "collectives/sweep_measure.h"
#include "tdist/deadline.h"
#include "tdist/settings.h"

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
  double wait_idle = 0;  // seconds to wait for an idle machine before each run (0: none)
  std::string raw;       // file to write every round's figures to
  std::string from_raw;  // file to read them from instead of measuring
};

std::vector<size_t> sweep_sizes(const Options& o) {
  std::vector<size_t> out;
  for (size_t b = std::max<size_t>(4, o.min_bytes / 4 * 4); b <= o.max_bytes; b *= o.factor) {
    out.push_back(b);
  }
  if (out.empty() || out.back() != o.max_bytes / 4 * 4) out.push_back(o.max_bytes / 4 * 4);
  return out;
}

// The proposed thresholds of one (transport, world), as selection.cc's Thresholds.
struct Proposal {
  size_t recursive_doubling = 0, halving_doubling = 0, broadcast_binomial = 0, reduce_binomial = 0;
};

// Prints one collective's table and crossovers; returns the fitted thresholds (bytes up to
// which each algorithm but the last runs).
std::vector<size_t> report(const Options& o, Collective c, int world, transport::LinkClass link,
                           const sweep::Figures& figures) {
  const std::vector<Algorithm> algos = sweep::swept_algorithms(c, world);
  const std::string cname(coll::collective_name(c));
  auto row_of = [&](Algorithm a) -> const std::map<size_t, std::vector<double>>& {
    const auto it = figures.find(cname + " " + std::string(coll::algorithm_name(a)));
    if (it == figures.end()) {
      throw std::runtime_error("no figures for " + cname + " " +
                               std::string(coll::algorithm_name(a)) + " at world " +
                               std::to_string(world));
    }
    return it->second;
  };
  std::vector<size_t> sizes;
  for (const auto& [bytes, us] : row_of(algos[0])) sizes.push_back(bytes);
  std::vector<std::vector<std::vector<double>>> rounds;  // [algorithm][size][round]
  std::vector<std::vector<double>> times;                // [algorithm][size]: their median
  std::printf("%-14s", cname.c_str());
  for (Algorithm a : algos) std::printf(" %19s", std::string(coll::algorithm_name(a)).c_str());
  std::printf("   (us; * fastest, > selection.cc today)\n");
  for (Algorithm a : algos) {
    const auto& row = row_of(a);
    rounds.emplace_back();
    times.emplace_back();
    for (size_t bytes : sizes) {
      const auto it = row.find(bytes);
      if (it == row.end() || it->second.size() != row_of(algos[0]).at(bytes).size()) {
        throw std::runtime_error("figures of " + cname + " at " + std::to_string(bytes) +
                                 " B differ in rounds between algorithms");
      }
      rounds.back().push_back(it->second);
      times.back().push_back(sweep::median(it->second));
    }
  }
  // The cuts selection.cc makes today (kept where the measurements tie).
  std::vector<size_t> today_cuts(algos.size() - 1, 0);
  for (size_t s = 0; s < sizes.size(); ++s) {
    size_t fastest = 0;
    for (size_t a = 1; a < algos.size(); ++a) {
      if (times[a][s] < times[fastest][s]) fastest = a;
    }
    Algorithm today = coll::select_algorithm(c, sizes[s], world, 1, link);
    if (world == 2 && today == Algorithm::kHalvingDoubling) today = Algorithm::kRing;
    const size_t index =
        static_cast<size_t>(std::find(algos.begin(), algos.end(), today) - algos.begin());
    for (size_t i = index; i < today_cuts.size(); ++i) ++today_cuts[i];
    std::printf("%14s", sweep::human_bytes(sizes[s]).c_str());
    for (size_t a = 0; a < algos.size(); ++a) {
      std::printf(" %c%c%16.1f", algos[a] == today ? '>' : ' ', a == fastest ? '*' : ' ',
                  times[a][s]);
    }
    std::printf("\n");
  }
  const sweep::Fit fit = sweep::fit_cuts(rounds, o.margin, today_cuts);
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
    } else if (flag == "--wait-idle") {
      o.wait_idle = std::stod(value);
    } else if (flag == "--raw") {
      o.raw = value;
    } else if (flag == "--from-raw") {
      o.from_raw = value;
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

// The run's conditions, for the output and the raw file.
std::string header(const Options& o) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char date[64] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  char text[512];
  std::snprintf(text, sizeof(text),
                "algo_sweep %s on %s, %ld online cpus; TDIST_CHUNK_BYTES=%lld "
                "TDIST_SHM_RING_BYTES=%lld TDIST_POLL_US=%lld; sizes %s..%s x%zu, %d rounds, "
                "iters x%.2f",
                date, host, sysconf(_SC_NPROCESSORS_ONLN),
                static_cast<long long>(setting_int("TDIST_CHUNK_BYTES")),
                static_cast<long long>(setting_int("TDIST_SHM_RING_BYTES")),
                static_cast<long long>(setting_int("TDIST_POLL_US")),
                sweep::human_bytes(sweep_sizes(o).front()).c_str(),
                sweep::human_bytes(sweep_sizes(o).back()).c_str(), o.factor, o.rounds,
                o.iters_scale);
  return text;
}

// Prints one (transport, world)'s tables and records its proposal.
void analyze(const Options& o, const std::string& kind, int world, const sweep::Figures& figures,
             Proposal& p) {
  const auto link = kind == "shm" ? transport::LinkClass::kShm : transport::LinkClass::kTcp;
  const auto barrier = figures.find("barrier dissemination");
  if (barrier != figures.end() && barrier->second.count(0) > 0) {
    std::printf("barrier pair alone (in every figure): %.1f us\n",
                sweep::median(barrier->second.at(0)));
  }
  const std::vector<size_t> ar = report(o, Collective::kAllReduce, world, link, figures);
  p.recursive_doubling = ar[0];
  p.halving_doubling = ar.back();  // world 2: none (the ring is the same exchange)
  p.broadcast_binomial = report(o, Collective::kBroadcast, world, link, figures)[0];
  p.reduce_binomial = report(o, Collective::kReduce, world, link, figures)[0];
  std::fflush(stdout);
}

// Measures every (transport, world) of `o`, or reads them from o.from_raw.
std::map<std::string, std::map<int, Proposal>> measure_and_analyze(const Options& o) {
  std::map<std::string, std::map<int, Proposal>> proposals;
  if (!o.from_raw.empty()) {
    std::ifstream in(o.from_raw);
    if (!in) throw std::runtime_error("cannot read " + o.from_raw);
    std::map<std::pair<std::string, int>, sweep::Figures> runs;
    std::map<std::pair<std::string, int>, std::string> conditions;  // "shm, world 2: ..."
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# ", 0) == 0) {
        char kind[16] = {};
        int world = 0;
        if (std::sscanf(line.c_str() + 2, "%15[a-z], world %d:", kind, &world) == 2) {
          conditions[{kind, world}] = line.substr(2);
        } else {
          std::printf("%s\n", line.c_str() + 2);
        }
        continue;
      }
      std::istringstream fields(line);
      std::string kind;
      int world = 0;
      if (!(fields >> kind >> world)) continue;
      sweep::read_figures(fields, runs[{kind, world}]);
    }
    std::printf("margin %.0f%%, figures from %s\n\n", o.margin * 100, o.from_raw.c_str());
    for (const auto& [run, figures] : runs) {
      const auto it = conditions.find(run);
      if (it != conditions.end()) {
        std::printf("== %s\n", it->second.c_str());
      } else {
        std::printf("== %s, world %d\n", run.first.c_str(), run.second);
      }
      analyze(o, run.first, run.second, figures, proposals[run.first][run.second]);
    }
    return proposals;
  }
  std::ofstream raw;
  if (!o.raw.empty()) {
    raw.open(o.raw);
    if (!raw) throw std::runtime_error("cannot write " + o.raw);
    raw << "# " << header(o) << '\n';
  }
  std::printf("%s, margin %.0f%%\n\n", header(o).c_str(), o.margin * 100);
  const sweep::Plan plan{sweep_sizes(o), o.rounds, o.iters_scale};
  for (const std::string& kind : o.transports) {
    for (int world : o.worlds) {
      const double idle_before = o.wait_idle > 0 ? sweep::wait_idle(o.wait_idle) : -1;
      const auto start = Clock::now();
      const sweep::CpuTimes cpu_start = sweep::cpu_times();
      const sweep::Figures figures =
          sweep::run_world(plan, kind, world, raw.is_open() ? &raw : nullptr);
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      const double others = sweep::other_cores(cpu_start, sweep::cpu_times(), secs);
      char conditions[256];
      std::snprintf(conditions, sizeof(conditions),
                    "%s, world %d: %.0f s; other processes used %.2f cores during the run%s",
                    kind.c_str(), world, secs, others,
                    others > 0.25 ? "  NOISY: rerun on an idle machine" : "");
      std::printf("== %s", conditions);
      if (idle_before >= 0) std::printf(" (%.2f in the second before)", idle_before);
      std::printf("\n");
      if (raw.is_open()) raw << "# " << conditions << '\n' << std::flush;
      analyze(o, kind, world, figures, proposals[kind][world]);
    }
  }
  return proposals;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    sweep::check_coverage();
    const Options o = parse(argc, argv);
    const auto proposals = measure_and_analyze(o);
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
