// BlockCache and CachingAllocator (core/block_cache.h): blocks come back from this
// thread's cache, the cache keeps at most kKeep, blocks given back on another thread serve
// that thread, and allocate_shared objects live and die normally.
#include "core/block_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace tdist::core {
namespace {

struct Tracked {
  static inline int alive = 0;
  explicit Tracked(int v) : value(v) { ++alive; }
  ~Tracked() { --alive; }
  int value;
  char padding[40] = {};
};

TEST(BlockCacheTest, ABlockGivenBackIsTheNextOneTaken) {
  using Blocks = BlockCache<48, 16>;
  void* a = Blocks::get();
  Blocks::put(a);
  EXPECT_EQ(Blocks::get(), a);
  Blocks::put(a);
}

TEST(BlockCacheTest, KeepsAtMostKKeepBlocks) {
  using Blocks = BlockCache<64, 8>;
  std::vector<void*> blocks;
  for (int i = 0; i < Blocks::kKeep + 8; ++i) blocks.push_back(Blocks::get());
  for (void* b : blocks) Blocks::put(b);
  // The first kKeep given back are cached; the 8 after them went to the heap.
  std::set<void*> cached;
  for (int i = 0; i < Blocks::kKeep; ++i) cached.insert(Blocks::get());
  EXPECT_EQ(cached, std::set<void*>(blocks.begin(), blocks.begin() + Blocks::kKeep));
  for (void* b : cached) Blocks::put(b);
}

TEST(BlockCacheTest, ABlockGivenBackOnAnotherThreadServesThatThread) {
  using Blocks = BlockCache<96, 16>;
  void* mine = Blocks::get();
  void* again = nullptr;
  std::thread([&] {
    Blocks::put(mine);
    again = Blocks::get();
    Blocks::put(again);
  }).join();  // the thread's cache (holding the block) is freed as it exits
  EXPECT_EQ(again, mine);
}

TEST(CachingAllocatorTest, SharedObjectsLiveAndDieAndReuseTheirBlock) {
  const Tracked* first = nullptr;
  {
    auto p = std::allocate_shared<Tracked>(CachingAllocator<Tracked>(), 7);
    EXPECT_EQ(p->value, 7);
    EXPECT_EQ(Tracked::alive, 1);
    first = p.get();
  }
  EXPECT_EQ(Tracked::alive, 0);
  auto q = std::allocate_shared<Tracked>(CachingAllocator<Tracked>(), 8);
  EXPECT_EQ(q.get(), first);  // the control block and object's block came back
  EXPECT_EQ(q->value, 8);
  std::vector<Tracked, CachingAllocator<Tracked>> many;  // arrays take the plain heap
  for (int i = 0; i < 5; ++i) many.emplace_back(i);
  EXPECT_EQ(many[4].value, 4);
}

}  // namespace
}  // namespace tdist::core
