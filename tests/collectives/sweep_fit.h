// Fitting selection thresholds to measured times, for algo_sweep (not part of the library).
//
// The algorithms of one collective are ordered as selection.cc uses them, by size: the
// first runs on the smallest messages, the last on the largest (all_reduce: recursive
// doubling, halving-doubling, ring). A fit is k-1 cuts into the measured sizes (ascending):
// algorithm i runs at the size indices [cuts[i-1], cuts[i]) (cuts[-1] = 0, cuts[k-1] = n).
// Its loss is the sum, over the sizes, of how much slower the chosen algorithm is than the
// fastest one there beyond `margin` (0.1: a difference up to 10% counts as noise, so such
// sizes do not move a cut): max(0, t / t_fastest - 1 - margin). fit_cuts() returns the
// cuts of least loss; where several have it (sizes where the algorithms tie), the ones
// nearest the middle of that range, so a tie region does not pull a cut to one end.
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

// times[a][s]: microseconds of algorithm a at size index s (every row as long, k >= 1).
Fit fit_cuts(const std::vector<std::vector<double>>& times, double margin);

// The bytes up to which (inclusive) the algorithms before a cut run: 0 for cut 0 (never),
// SIZE_MAX for cut n (always), otherwise sizes[cut - 1].
size_t cut_bytes(const std::vector<size_t>& sizes, size_t cut);

// "8", "64 KiB", "2 MiB" for humans; "kNever", "kAlways", "512 << 10", "2 << 20", "100"
// for selection.cc.
std::string human_bytes(size_t bytes);
std::string code_bytes(size_t bytes);

}  // namespace tdist::coll::sweep
