// DistributedSampler in an elastic job (torch/elastic.h): world_mask(taken) equals the OR of
// every rank's consumed_mask() after each took `taken`; after set_world + resume with it the
// survivors of a shrink (4 -> 3 -> 2, twice within an epoch) read every remaining sample of
// the epoch once; with the same world the order goes on exactly as without the failure
// (when the epoch needs no padding).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "tdist/error.h"
#include "tdist/torch/sampler.h"

namespace tdist::torch::sampler_test_elastic {
namespace {

DistributedSampler make(size_t n, int world, int rank, bool drop_last = false) {
  return DistributedSampler(
      n, {.num_replicas = world, .rank = rank, .shuffle = true, .seed = 5, .drop_last = drop_last});
}

// Every rank takes `taken` samples; returns them, and the ranks' OR'd consumed masks.
std::vector<size_t> take(std::vector<DistributedSampler>& ranks, size_t taken,
                         std::vector<uint8_t>* ored) {
  std::vector<size_t> got;
  for (DistributedSampler& s : ranks) {
    auto batch = s.next(taken);
    if (batch) got.insert(got.end(), batch->begin(), batch->end());
    std::vector<uint8_t> m = s.consumed_mask();
    if (ored->size() < m.size()) ored->resize(m.size(), 0);
    for (size_t i = 0; i < m.size(); ++i) (*ored)[i] |= m[i];
  }
  return got;
}

TEST(SamplerElastic, WorldMaskIsEveryRanksConsumedMask) {
  for (size_t n : {1u, 10u, 23u, 100u}) {
    for (int world : {1, 2, 3, 4}) {
      for (bool drop_last : {false, true}) {
        std::vector<DistributedSampler> ranks;
        for (int r = 0; r < world; ++r) ranks.push_back(make(n, world, r, drop_last));
        std::vector<uint8_t> ored;
        size_t taken = 0;
        for (size_t step : {1u, 2u, 5u}) {
          take(ranks, step, &ored);
          taken += step;
          for (int r = 0; r < world; ++r) {
            EXPECT_EQ(ranks[static_cast<size_t>(r)].world_mask(taken), ored)
                << "n " << n << " world " << world << " rank " << r << " taken " << taken;
          }
        }
      }
    }
  }
}

TEST(SamplerElastic, ShrinkingTwiceReadsTheEpochOnce) {
  const size_t n = 101;
  std::map<size_t, int> seen;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(make(n, 4, r));
  std::vector<uint8_t> ored;
  for (size_t s : take(ranks, 6, &ored)) ++seen[s];
  // Rank 3 dies: the others go on as ranks 0..2 from rank 0's world mask.
  std::vector<uint8_t> mask = ranks[0].world_mask(6);
  ranks.pop_back();
  for (int r = 0; r < 3; ++r) {
    ranks[static_cast<size_t>(r)].set_world(3, r);
    ranks[static_cast<size_t>(r)].resume(0, mask);
  }
  ored.clear();
  for (size_t s : take(ranks, 4, &ored)) ++seen[s];
  // Rank 0 dies: the other two, renumbered.
  mask = ranks[1].world_mask(4);
  ranks.erase(ranks.begin());
  for (int r = 0; r < 2; ++r) {
    ranks[static_cast<size_t>(r)].set_world(2, r);
    ranks[static_cast<size_t>(r)].resume(0, mask);
  }
  const size_t left = ranks[0].size();
  for (int r = 0; r < 2; ++r) {
    DistributedSampler& s = ranks[static_cast<size_t>(r)];
    auto rest = s.next(left);
    ASSERT_TRUE(rest.has_value());
    for (size_t p = 0; p < rest->size(); ++p) {
      if (!s.is_padding(p)) ++seen[(*rest)[p]];
    }
  }
  ASSERT_EQ(seen.size(), n);
  for (const auto& [sample, count] : seen) EXPECT_EQ(count, 1) << "sample " << sample;
}

// (Without padding: a resume pads with the epoch's remaining samples, PyTorch's order with
// its first ones.)
TEST(SamplerElastic, AResumeInTheSameWorldGoesOnAsBefore) {
  const size_t n = 52;
  std::vector<DistributedSampler> ranks, plain;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(make(n, 4, r));
    plain.push_back(make(n, 4, r));
  }
  std::vector<uint8_t> ored;
  take(ranks, 3, &ored);
  take(plain, 3, &ored);
  const std::vector<uint8_t> mask = ranks[2].world_mask(3);
  for (int r = 0; r < 4; ++r) {
    ranks[static_cast<size_t>(r)].set_world(4, r);
    ranks[static_cast<size_t>(r)].resume(0, mask);
    EXPECT_EQ(ranks[static_cast<size_t>(r)].next(100), plain[static_cast<size_t>(r)].next(100))
        << "rank " << r;
  }
}

TEST(SamplerElastic, SetWorldRefusesBadRanks) {
  DistributedSampler s = make(10, 2, 0);
  EXPECT_THROW(s.set_world(0, 0), InvalidArgument);
  EXPECT_THROW(s.set_world(2, 2), InvalidArgument);
  EXPECT_THROW(s.set_world(2, -1), InvalidArgument);
}

}  // namespace
}  // namespace tdist::torch::sampler_test_elastic
