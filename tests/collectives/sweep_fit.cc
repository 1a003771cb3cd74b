// Threshold fitting for algo_sweep (sweep_fit.h).
#include "collectives/sweep_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>

namespace tdist::coll::sweep {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Fit fit_cuts(const std::vector<std::vector<double>>& times, double margin,
             const std::vector<size_t>& prefer) {
  std::vector<std::vector<std::vector<double>>> rounds(times.size());
  for (size_t a = 0; a < times.size(); ++a) {
    for (double t : times[a]) rounds[a].push_back({t});
  }
  return fit_cuts(rounds, margin, prefer);
}

Fit fit_cuts(const std::vector<std::vector<std::vector<double>>>& rounds, double margin,
             const std::vector<size_t>& prefer) {
  const size_t k = rounds.size();
  const size_t n = k == 0 ? 0 : rounds[0].size();
  // prefix[a][s]: the excess of algorithm a summed over the sizes before s.
  std::vector<std::vector<double>> prefix(k, std::vector<double>(n + 1, 0.0));
  for (size_t s = 0; s < n; ++s) {
    const size_t nrounds = rounds[0][s].size();
    std::vector<std::vector<double>> excess(k);
    for (size_t r = 0; r < nrounds; ++r) {
      double fastest = std::numeric_limits<double>::infinity();
      for (size_t a = 0; a < k; ++a) fastest = std::min(fastest, rounds[a][s][r]);
      for (size_t a = 0; a < k; ++a) {
        excess[a].push_back(std::max(0.0, rounds[a][s][r] / fastest - 1.0 - margin));
      }
    }
    for (size_t a = 0; a < k; ++a) prefix[a][s + 1] = prefix[a][s] + median(excess[a]);
  }
  // Every ascending choice of k - 1 cuts, with its loss.
  std::vector<std::vector<size_t>> all;
  std::vector<double> losses;
  std::vector<size_t> cuts;
  std::function<void(size_t, size_t, double)> choose = [&](size_t a, size_t from, double loss) {
    if (a + 1 == k) {
      all.push_back(cuts);
      losses.push_back(loss + prefix[a][n] - prefix[a][from]);
      return;
    }
    for (size_t cut = from; cut <= n; ++cut) {
      cuts.push_back(cut);
      choose(a + 1, cut, loss + prefix[a][cut] - prefix[a][from]);
      cuts.pop_back();
    }
  };
  if (k == 0) return {};
  choose(0, 0, 0.0);
  const double best = *std::min_element(losses.begin(), losses.end());
  const double tolerance = 1e-9 * std::max(1.0, best);
  // The target among the optimal choices: `prefer`, or their middle, cut by cut.
  std::vector<double> centre(k - 1, 0.0);
  if (prefer.size() == k - 1) {
    for (size_t c = 0; c + 1 < k; ++c) centre[c] = static_cast<double>(prefer[c]);
  } else {
    size_t optimal = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      if (losses[i] > best + tolerance) continue;
      ++optimal;
      for (size_t c = 0; c + 1 < k; ++c) centre[c] += static_cast<double>(all[i][c]);
    }
    for (double& c : centre) c /= static_cast<double>(optimal);
  }
  Fit fit;
  double nearest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < all.size(); ++i) {
    if (losses[i] > best + tolerance) continue;
    double distance = 0;
    for (size_t c = 0; c + 1 < k; ++c) {
      distance += std::abs(static_cast<double>(all[i][c]) - centre[c]);
    }
    if (distance < nearest - 1e-9) {
      nearest = distance;
      fit.cuts = all[i];
      fit.loss = losses[i];
    }
  }
  return fit;
}

size_t cut_bytes(const std::vector<size_t>& sizes, size_t cut) {
  if (cut == 0) return 0;
  if (cut >= sizes.size()) return SIZE_MAX;
  return sizes[cut - 1];
}

namespace {

// `bytes` in its largest exact unit: the count, and 0 (bytes), 1 (KiB) or 2 (MiB).
std::pair<size_t, int> exact_unit(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return {bytes >> 20, 2};
  if (bytes >= 1024 && bytes % 1024 == 0) return {bytes >> 10, 1};
  return {bytes, 0};
}

}  // namespace

std::string human_bytes(size_t bytes) {
  if (bytes == SIZE_MAX) return "always";
  if (bytes == 0) return "never";
  static constexpr const char* kUnits[] = {" B", " KiB", " MiB"};
  const auto [count, unit] = exact_unit(bytes);
  return std::to_string(count) + kUnits[unit];
}

std::string code_bytes(size_t bytes) {
  if (bytes == SIZE_MAX) return "kAlways";
  if (bytes == 0) return "kNever";
  static constexpr const char* kShifts[] = {"", " << 10", " << 20"};
  const auto [count, unit] = exact_unit(bytes);
  return std::to_string(count) + kShifts[unit];
}

}  // namespace tdist::coll::sweep
