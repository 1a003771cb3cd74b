// Fitting selection thresholds to measured times, for algo_sweep (not part of the library).
//
// The algorithms of one collective are ordered as selection.cc uses them, by size: the
// first runs on the smallest messages, the last on the largest (all_reduce: recursive
// doubling, halving-doubling, ring). A fit is k-1 cuts into the measured sizes (ascending):
// algorithm i runs at the size indices [cuts[i-1], cuts[i]) (cuts[-1] = 0, cuts[k-1] = n).
// The excess of an algorithm at a size is how much slower it is than the fastest one
// there beyond `margin` (0.1: a difference up to 10% counts as noise),
// max(0, t / t_fastest - 1 - margin), computed in each round of measurements and taken as
// the median over the rounds: a difference counts only where most rounds show it. A fit's
// loss is the sum of the chosen algorithms' excesses. fit_cuts() returns the cuts of least
// loss; where several have it (sizes where the algorithms tie), the ones nearest `prefer`
// (the cuts in use today: a threshold moves only as far as a clear difference demands),
// or without it the middle of that range.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tdist::coll::sweep {

struct Fit {
  std::vector<size_t> cuts;  // k - 1 cuts, ascending, each in [0, n]
  double loss = 0;           // in units of "one size entirely slower by 100%"
};

// rounds[a][s][r]: microseconds of algorithm a at size index s in round r (every row as
// long, as many rounds everywhere, k >= 1); `prefer`: k - 1 cuts, or empty.
Fit fit_cuts(const std::vector<std::vector<std::vector<double>>>& rounds, double margin,
             const std::vector<size_t>& prefer = {});
// The same with one round: times[a][s].
Fit fit_cuts(const std::vector<std::vector<double>>& times, double margin,
             const std::vector<size_t>& prefer = {});

double median(std::vector<double> values);  // of a non-empty list

// The bytes up to which (inclusive) the algorithms before a cut run: 0 for cut 0 (never),
// SIZE_MAX for cut n (always), otherwise sizes[cut - 1].
size_t cut_bytes(const std::vector<size_t>& sizes, size_t cut);

// "8", "64 KiB", "2 MiB" for humans; "kNever", "kAlways", "512 << 10", "2 << 20", "100"
// for selection.cc.
std::string human_bytes(size_t bytes);
std::string code_bytes(size_t bytes);

}  // namespace tdist::coll::sweep
