// algo_sweep's threshold fitting (sweep_fit.h): clear crossovers, ties, noise within the
// margin, and the byte formats.
#include "collectives/sweep_fit.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tdist::coll::sweep {
namespace {

TEST(SweepFit, CutsWhereTheFasterAlgorithmChanges) {
  // Algorithm 0 wins the first three sizes clearly, algorithm 1 the rest.
  const Fit fit = fit_cuts({{1, 1, 1, 10, 10}, {5, 5, 5, 1, 1}}, 0.1);
  ASSERT_EQ(fit.cuts.size(), 1u);
  EXPECT_EQ(fit.cuts[0], 3u);
  EXPECT_DOUBLE_EQ(fit.loss, 0.0);
}

TEST(SweepFit, ThreeAlgorithms) {
  const Fit fit = fit_cuts({{1, 1, 9, 9, 9, 9}, {3, 3, 1, 1, 9, 9}, {9, 9, 9, 9, 1, 1}}, 0.1);
  EXPECT_EQ(fit.cuts, (std::vector<size_t>{2, 4}));
  // The middle one never wins clearly: it gets no sizes.
  const Fit skip = fit_cuts({{1, 1, 9, 9}, {5, 5, 5, 5}, {9, 9, 1, 1}}, 0.1);
  EXPECT_EQ(skip.cuts[0], skip.cuts[1]);
  EXPECT_EQ(skip.cuts[0], 2u);
}

TEST(SweepFit, TiesWithinTheMarginPutTheCutInTheirMiddle) {
  // Sizes 1..4 differ by 5% at most: the cut lies between 1 and 5, in the middle (3).
  const Fit fit = fit_cuts({{1, 1.05, 1, 1.05, 1, 3}, {3, 1, 1.05, 1, 1.05, 1}}, 0.1);
  EXPECT_EQ(fit.cuts[0], 3u);
  EXPECT_DOUBLE_EQ(fit.loss, 0.0);
}

TEST(SweepFit, TiesKeepThePreferredCuts) {
  const std::vector<std::vector<double>> times = {{1, 1.05, 1, 1.05, 1, 3},
                                                  {3, 1, 1.05, 1, 1.05, 1}};
  EXPECT_EQ(fit_cuts(times, 0.1, {4}).cuts[0], 4u);
  // A preference outside the optimal range moves only to its nearest end.
  EXPECT_EQ(fit_cuts(times, 0.1, {6}).cuts[0], 5u);
  EXPECT_EQ(fit_cuts(times, 0.1, {0}).cuts[0], 1u);
}

TEST(SweepFit, OneOutlierCostsLessThanMovingTheCut) {
  // Algorithm 1 wins once at size 1 by 50%, but algorithm 0 wins sizes 0, 2, 3 by 4x.
  const Fit fit = fit_cuts({{1, 1.5, 1, 1, 5, 5}, {4, 1, 4, 4, 1, 1}}, 0.1);
  EXPECT_EQ(fit.cuts[0], 4u);
  EXPECT_NEAR(fit.loss, 0.4, 1e-9);
}

TEST(SweepFit, ADifferenceCountsOnlyWhereMostRoundsShowIt) {
  // Size 1: algorithm 0 is 3x slower in one round of three, as fast in the others.
  const std::vector<std::vector<std::vector<double>>> rounds = {{{1, 1, 1}, {3, 1, 1}, {9, 9, 9}},
                                                                {{3, 3, 3}, {1, 1, 1}, {1, 1, 1}}};
  const Fit fit = fit_cuts(rounds, 0.1, {2});
  EXPECT_EQ(fit.cuts[0], 2u);
  EXPECT_DOUBLE_EQ(fit.loss, 0.0);
  // That round alone moves the cut.
  EXPECT_EQ(fit_cuts({{1, 3, 9}, {3, 1, 1}}, 0.1, {2}).cuts[0], 1u);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
}

TEST(SweepFit, CutBytesAndFormats) {
  const std::vector<size_t> sizes = {8, 1024, size_t{2} << 20};
  EXPECT_EQ(cut_bytes(sizes, 0), 0u);
  EXPECT_EQ(cut_bytes(sizes, 2), 1024u);
  EXPECT_EQ(cut_bytes(sizes, 3), SIZE_MAX);
  EXPECT_EQ(human_bytes(8), "8 B");
  EXPECT_EQ(human_bytes(64 << 10), "64 KiB");
  EXPECT_EQ(human_bytes(SIZE_MAX), "always");
  EXPECT_EQ(code_bytes(512 << 10), "512 << 10");
  EXPECT_EQ(code_bytes(size_t{2} << 20), "2 << 20");
  EXPECT_EQ(code_bytes(0), "kNever");
  EXPECT_EQ(code_bytes(100), "100");
}

}  // namespace
}  // namespace tdist::coll::sweep
