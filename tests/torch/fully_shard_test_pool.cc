// fully_shard's pool of host buffers (src/torch/shard_pool.h): blocks come back when their
// last tensor dies, on any thread, are lent again for requests of about their size, and
// the pool never holds more than the most it lent at once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>
#include <vector>

#include "torch/shard_pool.h"

namespace tdist::torch::fully_shard_test_pool {
namespace {

// The pool's invariant: what it lends and keeps together is within its high water.
void expect_within_high_water() {
  const shard_pool::Usage u = shard_pool::usage();
  EXPECT_LE(u.lent + u.kept, u.high_water);
  EXPECT_GE(u.lent, 0);
  EXPECT_GE(u.kept, 0);
}

TEST(ShardPoolTest, AFreedBlockIsLentAgainForItsSizeAndNotForAMuchSmallerOne) {
  // Odd sizes, which no other test of this process asks for.
  const int64_t n = 777'781;
  void* first = nullptr;
  {
    ::torch::Tensor t = shard_pool::empty({n}, ::torch::kFloat);
    ASSERT_EQ(t.numel(), n);
    ASSERT_TRUE(t.is_contiguous());
    t.fill_(2.5);
    EXPECT_EQ(t.sum().item<double>(), 2.5 * static_cast<double>(n));
    first = t.data_ptr();
    expect_within_high_water();
  }
  const int64_t kept_before = shard_pool::usage().kept;
  EXPECT_GE(kept_before, n * 4);
  {
    ::torch::Tensor again = shard_pool::empty({n / 7, 7}, ::torch::kFloat);
    EXPECT_EQ(again.data_ptr(), first);  // the same block
    EXPECT_EQ(again.sizes(), (std::vector<int64_t>{n / 7, 7}));
    // A third of the size: not that block (kept for its size), a new one.
    ::torch::Tensor small = shard_pool::empty({n / 3}, ::torch::kFloat);
    EXPECT_NE(small.data_ptr(), first);
    expect_within_high_water();
  }
  expect_within_high_water();
}

TEST(ShardPoolTest, ABlockWhoseLastTensorDiesOnAnotherThreadComesBack) {
  const int64_t n = 555'557;
  const int64_t lent_before = shard_pool::usage().lent;
  ::torch::Tensor t = shard_pool::empty({n}, ::torch::kDouble);
  ::torch::Tensor view = t.narrow(0, 10, 100);  // a view keeps the block
  EXPECT_EQ(shard_pool::usage().lent, lent_before + n * 8);
  t = ::torch::Tensor();
  EXPECT_EQ(shard_pool::usage().lent, lent_before + n * 8);
  std::thread other([v = std::move(view)]() mutable { v = ::torch::Tensor(); });
  other.join();
  EXPECT_EQ(shard_pool::usage().lent, lent_before);
  expect_within_high_water();
}

TEST(ShardPoolTest, ManyThreadsTakingAndGivingKeepThePoolWithinItsHighWater) {
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([k] {
      for (int i = 0; i < 200; ++i) {
        ::torch::Tensor t = shard_pool::empty({1000 + 37 * ((i + k) % 11)}, ::torch::kFloat);
        t.fill_(static_cast<float>(i));
        EXPECT_EQ(t[0].item<float>(), static_cast<float>(i));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  expect_within_high_water();
}

TEST(ShardPoolTest, AnEmptyTensorAndOtherDtypes) {
  EXPECT_EQ(shard_pool::empty({0}, ::torch::kFloat).numel(), 0);
  ::torch::Tensor b = shard_pool::empty({3, 5}, ::torch::kBFloat16);
  EXPECT_EQ(b.scalar_type(), ::torch::kBFloat16);
  EXPECT_EQ(b.nbytes(), 30U);
  EXPECT_FALSE(b.requires_grad());
  expect_within_high_water();
}

}  // namespace
}  // namespace tdist::torch::fully_shard_test_pool
