// Measuring for algo_sweep (not part of the library): the collectives and algorithms it
// times, `world` forked ranks over one transport timing them, and how busy the machine
// was meanwhile.
//
// run_world() forks `world` processes that connect through a FileStore over `kind` ("tcp":
// connect_tcp_comm, "shm": connect_shm_comm) and warm up every path, then, in each of
// plan.rounds rounds, time every (collective, size, algorithm) for a number of iterations
// that falls with the size (times plan.iters_scale), the order of the algorithms rotating
// from round to round. One iteration: a barrier, then the collective (in place, zeros,
// f32, sum, root 0) and a second barrier, timed on every rank from the end of the first
// barrier to the end of the second; its time is the slowest rank's. The second barrier
// makes that the time until every rank is done (a rank's own part can end long before:
// the root of a broadcast once its sends are buffered), at the price of one barrier in
// every figure (measured alone as "barrier dissemination" at 0 bytes). Each round gives a
// point the median of its iterations.
// Blocking; throws std::runtime_error when a rank failed (it printed why to stderr).
// Not thread-safe (forks).
#pragma once

#include <cstddef>
#include <istream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/selection.h"

namespace tdist::coll::sweep {

inline constexpr Collective kSwept[] = {Collective::kAllReduce, Collective::kBroadcast,
                                        Collective::kReduce};

// The flat algorithms of `c` in the order selection.cc uses them by size (the latency one
// first). With 2 ranks, halving-doubling is the ring's exchange (all_reduce.cc), so only
// the ring is timed.
std::vector<Algorithm> swept_algorithms(Collective c, int world);

// Throws when selection.h has a flat algorithm of kSwept that swept_algorithms() lacks.
void check_coverage();

struct Plan {
  std::vector<size_t> sizes;  // bytes per rank, ascending, multiples of 4
  int rounds = 3;
  double iters_scale = 1.0;
};

// Iterations of a point of `bytes` per round.
int iterations(const Plan& plan, size_t bytes);

// Round medians in microseconds by "collective algorithm" and bytes (the barrier pair alone
// as "barrier dissemination" at 0 bytes).
using Figures = std::map<std::string, std::map<size_t, std::vector<double>>>;

// Reads lines "collective algorithm bytes us..." (one figure per round) into `figures`.
void read_figures(std::istream& in, Figures& figures);

// Runs `world` ranks over `kind`; their figures, also appended to `raw` (when not null) as
// lines "transport world collective algorithm bytes us...".
Figures run_world(const Plan& plan, const std::string& kind, int world, std::ostream* raw);

// CPU seconds used since boot by the whole machine (/proc/stat; steal included) and by
// this process's waited-for children (the ranks).
struct CpuTimes {
  double machine = 0;
  double children = 0;
};
CpuTimes cpu_times();

// Cores that other processes kept busy between `a` and `b`, `wall` seconds apart.
double other_cores(const CpuTimes& a, const CpuTimes& b, double wall);

// Waits up to `max_seconds` for a second in which other processes use under 0.1 cores;
// returns the cores they used in the last second measured.
double wait_idle(double max_seconds);

}  // namespace tdist::coll::sweep
