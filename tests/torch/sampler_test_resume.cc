// DistributedSampler's exactly-once resume: old worlds of 1 to 4 ranks read part of an
// epoch through loader-like copies, the OR of their consumed masks resumes it on 1 to 4
// new ranks (once or twice), and the rest of the epoch plus what was read covers every
// sample once; then the next epoch is PyTorch's again. Also: an empty mask is PyTorch's
// order, set_epoch with the same epoch keeps a resume, a loader's copy made before the
// resume follows it, the most recent reset wins, and wrong-size masks are refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/torch/sampler.h"

namespace tdist::torch::sampler_test_resume {
namespace {

constexpr size_t kSizes[] = {0, 1, 7, 10, 23, 100};
constexpr int64_t kSeed = 11;
constexpr int64_t kEpoch = 3;

struct Data {
  size_t n;
  bool shuffle;
  bool drop_last;
};

DistributedSampler make(const Data& s, int world, int rank) {
  return DistributedSampler(s.n, {.num_replicas = world,
                                  .rank = rank,
                                  .shuffle = s.shuffle,
                                  .seed = kSeed,
                                  .drop_last = s.drop_last});
}

// The epoch's order before padding: element g is the sample at global position g.
std::vector<size_t> epoch_order(const Data& s, int64_t epoch) {
  DistributedSampler one(s.n, {.num_replicas = 1, .rank = 0, .shuffle = s.shuffle, .seed = kSeed});
  one.set_epoch(epoch);
  return one.indices();
}

size_t mask_bytes(size_t positions) { return (positions + 7) / 8; }

bool bit(const std::vector<uint8_t>& mask, size_t g) {
  return g / 8 < mask.size() && ((mask[g / 8] >> (g % 8)) & 1) != 0;
}

void or_into(std::vector<uint8_t>& into, const std::vector<uint8_t>& mask) {
  if (into.size() < mask.size()) into.resize(mask.size(), 0);
  for (size_t i = 0; i < mask.size(); ++i) into[i] = static_cast<uint8_t>(into[i] | mask[i]);
}

std::vector<uint8_t> all_ones(size_t positions) {
  std::vector<uint8_t> mask(mask_bytes(positions), 0);
  for (size_t g = 0; g < positions; ++g)
    mask[g / 8] = static_cast<uint8_t>(mask[g / 8] | 1U << (g % 8));
  return mask;
}

// One job's part of the epoch: every rank builds its sampler, makes the loader's copy, resumes
// (when `resume_mask` is given), calls set_epoch as a training loop does, and the copy, reset
// as a loader's begin() does, takes `batches` batches of `batch_size` (rank r takes
// batches + extra[r] where extra is given). Returns the OR of the ranks' masks; appends the
// real samples the copies handed out to *read. With then_next_epoch, each rank then calls
// set_epoch(kEpoch + 1), which must give a fresh sampler's order (on the loader's copy too).
struct Stage {
  std::vector<uint8_t> mask;
  std::vector<size_t> sizes;  // every rank's size()
  size_t real_positions = 0;
};

Stage run_stage(const Data& s, int world, const std::vector<uint8_t>* resume_mask, size_t batches,
                size_t batch_size, std::vector<size_t>* read, const std::vector<size_t>& extra = {},
                bool then_next_epoch = false) {
  Stage stage;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler = make(s, world, rank);
    DistributedSampler loader_copy = sampler;  // make_data_loader's copy, before the resume
    if (resume_mask != nullptr) {
      sampler.resume(kEpoch, *resume_mask);
    }
    sampler.set_epoch(kEpoch);
    loader_copy.reset();
    EXPECT_EQ(loader_copy.indices(), sampler.indices()) << "rank " << rank;
    const size_t take = batches + (extra.empty() ? 0 : extra[static_cast<size_t>(rank)]);
    size_t handed = 0;
    for (size_t k = 0; k < take; ++k) {
      auto batch = loader_copy.next(batch_size);
      if (!batch) break;
      handed += batch->size();
    }
    for (size_t p = 0; p < handed; ++p) {
      if (!loader_copy.is_padding(p)) read->push_back(loader_copy.indices()[p]);
    }
    const std::vector<uint8_t> mask = sampler.consumed_mask();
    EXPECT_EQ(mask, loader_copy.consumed_mask()) << "copies share the progress";
    if (rank == 0) {
      stage.mask = mask;
    } else {
      EXPECT_EQ(mask.size(), stage.mask.size()) << "rank " << rank;
    }
    or_into(stage.mask, mask);
    stage.sizes.push_back(sampler.size());
    stage.real_positions = sampler.real_positions();
    if (then_next_epoch) {
      sampler.set_epoch(kEpoch + 1);
      DistributedSampler fresh = make(s, world, rank);
      fresh.set_epoch(kEpoch + 1);
      EXPECT_EQ(sampler.indices(), fresh.indices()) << "rank " << rank;
      EXPECT_EQ(sampler.size(), fresh.size());
      EXPECT_EQ(sampler.num_real_samples(), fresh.num_real_samples());
      loader_copy.reset();
      EXPECT_EQ(loader_copy.indices(), fresh.indices()) << "rank " << rank << ", loader's copy";
    }
  }
  return stage;
}

std::string describe(const Data& s) {
  return "n=" + std::to_string(s.n) + " shuffle=" + std::to_string(s.shuffle) +
         " drop_last=" + std::to_string(s.drop_last);
}

// The samples at the mask's positions.
std::vector<size_t> samples_of(const std::vector<uint8_t>& mask, const std::vector<size_t>& order) {
  std::vector<size_t> out;
  for (size_t g = 0; g < order.size(); ++g) {
    if (bit(mask, g)) out.push_back(order[g]);
  }
  return out;
}

// Every sample read by the stages (each stage's reads as `read`), with the final world's
// real indices of the rest of the epoch (its whole resumed pass, drained): each sample at
// most once; every position the final world keeps (all with drop_last off), and every
// position any stage marked, once.
void expect_exactly_once(const Data& s, const std::vector<size_t>& read,
                         const std::vector<uint8_t>& marked, size_t final_real) {
  const std::vector<size_t> order = epoch_order(s, kEpoch);
  std::vector<int> count(s.n, 0);
  for (size_t sample : read) {
    ASSERT_LT(sample, s.n);
    ++count[sample];
  }
  size_t expected = 0;
  for (size_t g = 0; g < s.n; ++g) {
    const bool should = g < final_real || bit(marked, g);
    EXPECT_EQ(count[order[g]], should ? 1 : 0)
        << "sample " << order[g] << " (position " << g << ")";
    expected += should ? 1 : 0;
  }
  if (!s.drop_last) {
    EXPECT_EQ(expected, s.n);
  }
  EXPECT_EQ(read.size(), expected);
}

// Each new world rank drains its loader copy (the whole resumed pass), appending the real
// indices to *read; every new rank has the same size(), and afterwards every real position
// is marked and set_epoch(kEpoch + 1) is a fresh sampler's order.
void finish_and_check_next_epoch(const Data& s, int world, const std::vector<uint8_t>& mask,
                                 std::vector<size_t>* read) {
  const Stage last = run_stage(s, world, &mask, s.n + 1, 1, read, {}, /*then_next_epoch=*/true);
  for (size_t size : last.sizes) EXPECT_EQ(size, last.sizes[0]) << "every new rank the same size()";
  for (size_t g = 0; g < last.real_positions; ++g) EXPECT_TRUE(bit(last.mask, g)) << g;
}

struct Take {
  size_t batches;
  size_t batch_size;
};
constexpr Take kTakes[] = {{0, 3}, {1, 2}, {2, 3}, {1000, 1}};

TEST(DistributedSamplerResume, RestOfTheEpochOnAnotherWorldSizeIsExactlyOnce) {
  for (size_t n : kSizes) {
    for (bool shuffle : {false, true}) {
      for (bool drop_last : {false, true}) {
        const Data s{n, shuffle, drop_last};
        const std::vector<size_t> order = epoch_order(s, kEpoch);
        for (int old_world = 1; old_world <= 4; ++old_world) {
          for (int new_world = 1; new_world <= 4; ++new_world) {
            for (const Take& take : kTakes) {
              SCOPED_TRACE(describe(s) + " W=" + std::to_string(old_world) + " W'=" +
                           std::to_string(new_world) + " batches=" + std::to_string(take.batches) +
                           "x" + std::to_string(take.batch_size));
              std::vector<size_t> read;
              const Stage old_stage =
                  run_stage(s, old_world, nullptr, take.batches, take.batch_size, &read);
              EXPECT_EQ(old_stage.mask.size(), mask_bytes(old_stage.real_positions));
              // The mask holds exactly what the copies handed out.
              std::vector<size_t> marked = samples_of(old_stage.mask, order);
              std::vector<size_t> sorted_read = read;
              std::sort(marked.begin(), marked.end());
              std::sort(sorted_read.begin(), sorted_read.end());
              ASSERT_EQ(marked, sorted_read);
              std::vector<size_t> all = read;
              finish_and_check_next_epoch(s, new_world, old_stage.mask, &all);
              DistributedSampler probe = make(s, new_world, 0);
              expect_exactly_once(s, all, old_stage.mask, probe.real_positions());
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerResume, RanksThatReadDifferentAmountsStillResumeExactlyOnce) {
  for (size_t n : {size_t{10}, size_t{23}, size_t{100}}) {
    for (bool drop_last : {false, true}) {
      const Data s{n, true, drop_last};
      SCOPED_TRACE(describe(s));
      std::vector<size_t> read;
      const Stage old_stage = run_stage(s, 4, nullptr, 1, 2, &read, {0, 3, 1, 5});
      std::vector<size_t> all = read;
      finish_and_check_next_epoch(s, 3, old_stage.mask, &all);
      expect_exactly_once(s, all, old_stage.mask, make(s, 3, 0).real_positions());
    }
  }
}

TEST(DistributedSamplerResume, SavingDuringAResumedEpochAndResumingAgainIsExactlyOnce) {
  for (size_t n : kSizes) {
    for (bool shuffle : {false, true}) {
      for (bool drop_last : {false, true}) {
        const Data s{n, shuffle, drop_last};
        const std::vector<size_t> order = epoch_order(s, kEpoch);
        for (int w1 = 1; w1 <= 4; ++w1) {
          for (int w2 = 1; w2 <= 4; ++w2) {
            const int w3 = 1 + (w1 + w2) % 4;
            SCOPED_TRACE(describe(s) + " worlds " + std::to_string(w1) + " -> " +
                         std::to_string(w2) + " -> " + std::to_string(w3));
            std::vector<size_t> read;
            const Stage first = run_stage(s, w1, nullptr, 1, 2, &read);
            const Stage second = run_stage(s, w2, &first.mask, 1, 3, &read);
            // The second mask keeps the first's positions and adds what the second read.
            for (size_t g = 0; g < n; ++g) {
              if (bit(first.mask, g)) {
                EXPECT_TRUE(bit(second.mask, g)) << g;
              }
            }
            std::vector<size_t> marked = samples_of(second.mask, order);
            std::vector<size_t> sorted_read = read;
            std::sort(marked.begin(), marked.end());
            std::sort(sorted_read.begin(), sorted_read.end());
            ASSERT_EQ(marked, sorted_read);
            std::vector<size_t> all = read;
            finish_and_check_next_epoch(s, w3, second.mask, &all);
            expect_exactly_once(s, all, second.mask, make(s, w3, 0).real_positions());
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerResume, AnEmptyMaskIsPyTorchsOrder) {
  for (size_t n : kSizes) {
    for (bool shuffle : {false, true}) {
      for (bool drop_last : {false, true}) {
        for (int world = 1; world <= 4; ++world) {
          for (int rank = 0; rank < world; ++rank) {
            const Data s{n, shuffle, drop_last};
            SCOPED_TRACE(describe(s) + " R=" + std::to_string(world) +
                         " rank=" + std::to_string(rank));
            DistributedSampler fresh = make(s, world, rank);
            fresh.set_epoch(kEpoch);
            DistributedSampler resumed = make(s, world, rank);
            const std::vector<uint8_t> empty(mask_bytes(resumed.real_positions()), 0);
            EXPECT_EQ(resumed.consumed_mask(), empty);
            resumed.resume(kEpoch, empty);
            EXPECT_EQ(resumed.epoch(), kEpoch);
            EXPECT_EQ(resumed.indices(), fresh.indices());
            EXPECT_EQ(resumed.size(), fresh.size());
            EXPECT_EQ(resumed.num_real_samples(), fresh.num_real_samples());
            EXPECT_EQ(resumed.consumed_mask(), empty);
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerResume, ConsumedMaskOfAFreshEpoch) {
  // n = 10 over 4 ranks, no shuffle: rank 2 holds positions 2, 6 and padding (10 -> 0).
  DistributedSampler sampler(10, {.num_replicas = 4, .rank = 2, .shuffle = false});
  EXPECT_EQ(sampler.real_positions(), 10U);
  EXPECT_EQ(sampler.consumed_mask(), (std::vector<uint8_t>{0, 0}));
  DistributedSampler loader_copy = sampler;
  loader_copy.reset();
  EXPECT_EQ(*loader_copy.next(1), (std::vector<size_t>{2}));
  EXPECT_EQ(sampler.consumed_mask(), (std::vector<uint8_t>{0x04, 0}));
  EXPECT_EQ(*loader_copy.next(5), (std::vector<size_t>{6, 0}));
  EXPECT_EQ(sampler.consumed_mask(), (std::vector<uint8_t>{0x44, 0})) << "padding is not marked";
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.consumed_mask(), (std::vector<uint8_t>{0, 0})) << "a new epoch starts empty";

  DistributedSampler cut(10, {.num_replicas = 4, .rank = 3, .shuffle = false, .drop_last = true});
  EXPECT_EQ(cut.real_positions(), 8U);
  EXPECT_EQ(cut.consumed_mask().size(), 1U);
  DistributedSampler empty(0, {.num_replicas = 3, .rank = 1});
  EXPECT_EQ(empty.real_positions(), 0U);
  EXPECT_TRUE(empty.consumed_mask().empty());
  empty.resume(2, {});
  EXPECT_EQ(empty.size(), 0U);
  EXPECT_FALSE(empty.next(4).has_value());
}

TEST(DistributedSamplerResume, ResumedOrderIsTheRestDealtRoundRobin) {
  // 10 samples unshuffled, positions 0, 1, 2, 5 consumed: the rest 3 4 6 7 8 9 over 4 ranks
  // is rank 0: 3 8, rank 1: 4 9, rank 2: 6 3 (padding), rank 3: 7 4 (padding).
  const std::vector<uint8_t> consumed{0x27, 0};
  const std::vector<std::vector<size_t>> expected{{3, 8}, {4, 9}, {6, 3}, {7, 4}};
  for (int rank = 0; rank < 4; ++rank) {
    DistributedSampler sampler(10, {.num_replicas = 4, .rank = rank, .shuffle = false});
    sampler.resume(0, consumed);
    EXPECT_EQ(sampler.indices(), expected[static_cast<size_t>(rank)]) << rank;
    EXPECT_EQ(sampler.size(), 2U);
    EXPECT_EQ(sampler.num_real_samples(), rank < 2 ? 2U : 1U);
    EXPECT_EQ(sampler.is_padding(1), rank >= 2);
    EXPECT_EQ(sampler.consumed_mask(), consumed);
    EXPECT_EQ(*sampler.next(2), expected[static_cast<size_t>(rank)]);
    std::vector<uint8_t> mask = consumed;
    const size_t own = static_cast<size_t>(rank) < 2 ? 2 : 1;
    for (size_t p = 0; p < own; ++p) {
      const size_t g = expected[static_cast<size_t>(rank)][p];  // unshuffled: sample = position
      mask[g / 8] = static_cast<uint8_t>(mask[g / 8] | 1U << (g % 8));
    }
    EXPECT_EQ(sampler.consumed_mask(), mask) << rank;
  }
}

TEST(DistributedSamplerResume, SetEpochWithTheSameEpochKeepsTheResumedOrder) {
  const Data s{23, true, false};
  DistributedSampler sampler = make(s, 3, 1);
  std::vector<uint8_t> consumed(mask_bytes(23), 0);
  consumed[0] = 0x5a;
  consumed[2] = 0x41;
  sampler.resume(kEpoch, consumed);
  const std::vector<size_t> resumed = sampler.indices();
  EXPECT_EQ(sampler.size(), 6U);  // 23 - 6 consumed = 17 over 3 ranks
  sampler.set_epoch(kEpoch);
  EXPECT_EQ(sampler.indices(), resumed);
  sampler.reset();
  EXPECT_EQ(sampler.indices(), resumed);
  ASSERT_TRUE(sampler.next(2).has_value());
  sampler.set_epoch(kEpoch);
  EXPECT_EQ(sampler.indices(), resumed) << "a partial pass does not end the resume";

  // Another epoch ends it, also for a later set_epoch back to the resumed epoch.
  sampler.set_epoch(kEpoch + 1);
  DistributedSampler fresh = make(s, 3, 1);
  fresh.set_epoch(kEpoch + 1);
  EXPECT_EQ(sampler.indices(), fresh.indices());
  sampler.set_epoch(kEpoch);
  fresh.set_epoch(kEpoch);
  EXPECT_EQ(sampler.indices(), fresh.indices());

  // The end of the resumed pass ends it: the same epoch again is PyTorch's whole epoch.
  sampler.resume(kEpoch, consumed);
  DistributedSampler loader_copy = sampler;
  loader_copy.reset();
  while (loader_copy.next(4)) {
  }
  sampler.set_epoch(kEpoch);
  EXPECT_EQ(sampler.indices(), fresh.indices());
}

TEST(DistributedSamplerResume, EverythingConsumedLeavesNothingThenThePyTorchEpoch) {
  for (bool drop_last : {false, true}) {
    const Data s{23, true, drop_last};
    SCOPED_TRACE(describe(s));
    DistributedSampler sampler = make(s, 4, 3);
    DistributedSampler loader_copy = sampler;
    sampler.resume(kEpoch, all_ones(sampler.real_positions()));
    EXPECT_EQ(sampler.size(), 0U);
    EXPECT_EQ(sampler.num_real_samples(), 0U);
    EXPECT_TRUE(sampler.indices().empty());
    sampler.set_epoch(kEpoch);
    EXPECT_EQ(sampler.size(), 0U) << "set_epoch with the same epoch keeps it";
    loader_copy.reset();
    EXPECT_EQ(loader_copy.size(), 0U);
    EXPECT_FALSE(loader_copy.next(2).has_value());
    EXPECT_EQ(sampler.consumed_mask(), all_ones(sampler.real_positions()));
    sampler.set_epoch(kEpoch + 1);
    DistributedSampler fresh = make(s, 4, 3);
    fresh.set_epoch(kEpoch + 1);
    EXPECT_EQ(sampler.indices(), fresh.indices());
    loader_copy.reset();
    EXPECT_EQ(loader_copy.indices(), fresh.indices());
  }
}

TEST(DistributedSamplerResume, TheMostRecentResetWins) {
  DistributedSampler a(20, {.num_replicas = 2, .rank = 0, .shuffle = false});
  DistributedSampler b = a;
  a.reset();
  b.reset();
  ASSERT_TRUE(a.next(3).has_value());
  EXPECT_EQ(a.consumed_mask(), (std::vector<uint8_t>{0, 0, 0})) << "a is not the latest reset";
  ASSERT_TRUE(b.next(1).has_value());
  EXPECT_EQ(a.consumed_mask(), (std::vector<uint8_t>{0x01, 0, 0}));
  a.reset();
  EXPECT_EQ(a.consumed_mask(), (std::vector<uint8_t>{0, 0, 0})) << "a reset starts a new pass";
  ASSERT_TRUE(a.next(2).has_value());
  ASSERT_TRUE(b.next(5).has_value());
  EXPECT_EQ(b.consumed_mask(), (std::vector<uint8_t>{0x05, 0, 0}));
}

// The dataset indices of one pass over `loader` (a TensorDataset of 0..n-1), or only its
// first `limit` batches.
template <typename Loader>
std::vector<size_t> loader_order(Loader& loader, size_t limit = SIZE_MAX) {
  std::vector<size_t> out;
  size_t batches = 0;
  for (auto& batch : loader) {
    const ::torch::Tensor data = batch.data;
    for (int64_t i = 0; i < data.size(0); ++i)
      out.push_back(static_cast<size_t>(data[i].item<int64_t>()));
    if (++batches == limit) break;
  }
  return out;
}

TEST(DistributedSamplerResume, LibTorchLoadersCopyMadeBeforeTheResumeFollowsIt) {
  const int64_t n = 103;
  const Data s{static_cast<size_t>(n), true, false};
  const std::vector<size_t> order = epoch_order(s, kEpoch);
  auto make_loader = [&](DistributedSampler& sampler) {
    auto dataset = ::torch::data::datasets::TensorDataset(::torch::arange(n))
                       .map(::torch::data::transforms::Stack<::torch::data::TensorExample>());
    // workers(0): the loader asks for each batch as the loop takes it.
    return ::torch::data::make_data_loader(std::move(dataset), sampler,
                                           ::torch::data::DataLoaderOptions().batch_size(4));
  };
  // The old job: 2 ranks, each takes 3 batches of 4 through a real loader.
  std::vector<uint8_t> mask;
  std::vector<size_t> read;
  for (int rank = 0; rank < 2; ++rank) {
    DistributedSampler sampler = make(s, 2, rank);
    auto loader = make_loader(sampler);
    sampler.set_epoch(kEpoch);
    const std::vector<size_t> got = loader_order(*loader, 3);
    EXPECT_EQ(got.size(), 12U);
    read.insert(read.end(), got.begin(), got.end());
    or_into(mask, sampler.consumed_mask());
  }
  std::vector<size_t> marked = samples_of(mask, order);
  std::vector<size_t> sorted_read = read;
  std::sort(marked.begin(), marked.end());
  std::sort(sorted_read.begin(), sorted_read.end());
  EXPECT_EQ(marked, sorted_read) << "the mask is exactly the batches the loop took";

  // The new job: 3 ranks.
  std::vector<size_t> all = read;
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler sampler = make(s, 3, rank);
    auto loader = make_loader(sampler);  // copied before the resume
    sampler.resume(kEpoch, mask);
    EXPECT_EQ(sampler.size(), 27U);  // 103 - 24 = 79 over 3 ranks
    sampler.set_epoch(kEpoch);
    const std::vector<size_t> got = loader_order(*loader);
    EXPECT_EQ(got, sampler.indices()) << "the loader's copy follows the resume";
    for (size_t p = 0; p < got.size(); ++p) {
      if (!sampler.is_padding(p)) all.push_back(got[p]);
    }
    // The pass is over: the same epoch again is PyTorch's, as is the next one.
    DistributedSampler fresh = make(s, 3, rank);
    fresh.set_epoch(kEpoch);
    EXPECT_EQ(loader_order(*loader), fresh.indices());
    sampler.set_epoch(kEpoch + 1);
    fresh.set_epoch(kEpoch + 1);
    EXPECT_EQ(loader_order(*loader), fresh.indices());
  }
  expect_exactly_once(s, all, mask, static_cast<size_t>(n));
}

TEST(DistributedSamplerResume, RejectsAMaskOfTheWrongSize) {
  DistributedSampler sampler(23, {.num_replicas = 2, .rank = 0});
  try {
    sampler.resume(1, std::vector<uint8_t>(4, 0));
    FAIL() << "a mask of 4 bytes for 23 positions accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("take 3"), std::string::npos) << what;
  }
  EXPECT_THROW(sampler.resume(1, std::vector<uint8_t>(2, 0)), InvalidArgument);
  EXPECT_THROW(sampler.resume(1, {}), InvalidArgument);
  EXPECT_EQ(sampler.epoch(), 0) << "a refused resume changes nothing";
  EXPECT_EQ(sampler.size(), 12U);

  // drop_last: the mask of another world size may be shorter (or longer up to the
  // dataset's bytes); longer than the dataset's is refused.
  DistributedSampler cut(23, {.num_replicas = 4, .rank = 0, .drop_last = true});
  EXPECT_EQ(cut.real_positions(), 20U);
  EXPECT_NO_THROW(cut.resume(1, std::vector<uint8_t>(3, 0)));
  EXPECT_NO_THROW(cut.resume(1, std::vector<uint8_t>(1, 0xff)));
  EXPECT_EQ(cut.size(), 3U);  // positions 8..19 over 4 ranks
  EXPECT_THROW(cut.resume(1, std::vector<uint8_t>(4, 0)), InvalidArgument);
}

}  // namespace
}  // namespace tdist::torch::sampler_test_resume
