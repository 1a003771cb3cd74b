// FailureNotice (src/backends/nccl/failure_notice.h), which needs no GPU: one rank's
// announced failure reaches the watching ranks of its group through the store, never a rank
// that is not watching or whose notice is gone, never the announcer itself; a store call
// that blocks delays nobody's destructor.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "backends/nccl/failure_notice.h"
#include "tdist/hash_store.h"

namespace tdist::backends::nccl {
namespace {

using namespace std::chrono_literals;

constexpr auto kPoll = 20ms;

// What a notice's callback saw.
struct Seen {
  std::atomic<int> calls{0};
  std::string text;  // written by the one call
};

std::unique_ptr<FailureNotice> notice(std::shared_ptr<Store> store, std::shared_ptr<Seen> seen) {
  return std::make_unique<FailureNotice>(
      std::move(store),
      [seen](const std::string& text) {
        seen->text = text;
        seen->calls.fetch_add(1);
      },
      kPoll);
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(NcclFailureNoticeTest, AWatchingPeerSeesTheAnnouncedText) {
  auto store = std::make_shared<HashStore>();
  auto seen0 = std::make_shared<Seen>();
  auto seen1 = std::make_shared<Seen>();
  auto rank0 = notice(store, seen0);
  auto rank1 = notice(store, seen1);
  rank1->watch(true);
  rank0->watch(true);
  rank0->announce("rank 0/2 (nccl) all_reduce #3: did not finish within 1000 ms");
  ASSERT_TRUE(eventually([&] { return seen1->calls.load() == 1; }));
  EXPECT_EQ(seen1->text, "rank 0/2 (nccl) all_reduce #3: did not finish within 1000 ms");
  std::this_thread::sleep_for(10 * kPoll);
  EXPECT_EQ(seen0->calls.load(), 0);    // not its own notice
  EXPECT_EQ(seen1->calls.load(), 1);    // once
  rank0->announce("a second failure");  // ignored
  std::this_thread::sleep_for(5 * kPoll);
  EXPECT_EQ(to_string(store->get(FailureNotice::kKey)),
            "rank 0/2 (nccl) all_reduce #3: did not finish within 1000 ms");
}

TEST(NcclFailureNoticeTest, ARankLooksOnlyWhileItWatches) {
  auto store = std::make_shared<HashStore>();
  auto seen = std::make_shared<Seen>();
  auto rank1 = notice(store, seen);
  store->set(FailureNotice::kKey, "rank 0 failed");
  std::this_thread::sleep_for(10 * kPoll);
  EXPECT_EQ(seen->calls.load(), 0);
  rank1->watch(true);
  ASSERT_TRUE(eventually([&] { return seen->calls.load() == 1; }));
  EXPECT_EQ(seen->text, "rank 0 failed");
}

TEST(NcclFailureNoticeTest, NothingAnnouncedNothingSeen) {
  auto store = std::make_shared<HashStore>();
  auto seen = std::make_shared<Seen>();
  auto rank1 = notice(store, seen);
  rank1->watch(true);
  std::this_thread::sleep_for(10 * kPoll);
  EXPECT_EQ(seen->calls.load(), 0);
}

TEST(NcclFailureNoticeTest, NoCallbackAfterTheNoticeIsGoneButItsAnnouncementIsPublished) {
  auto store = std::make_shared<HashStore>();
  auto seen = std::make_shared<Seen>();
  {
    auto rank1 = notice(store, seen);
    rank1->watch(true);
  }
  {
    auto rank0 = notice(store, std::make_shared<Seen>());
    rank0->announce("rank 0 aborted");
  }  // destroyed at once: the announcement still goes out
  ASSERT_TRUE(eventually([&] { return store->check({FailureNotice::kKey}); }));
  std::this_thread::sleep_for(10 * kPoll);
  EXPECT_EQ(seen->calls.load(), 0);
}

// A store whose check blocks for a while, as a client queued behind another thread's long
// wait would.
class SlowStore : public HashStore {
 protected:
  bool do_check(const std::vector<std::string>& keys) override {
    std::this_thread::sleep_for(1500ms);
    return HashStore::do_check(keys);
  }
};

TEST(NcclFailureNoticeTest, DestructionDoesNotWaitForAStoreCallInFlight) {
  auto store = std::make_shared<SlowStore>();
  auto seen = std::make_shared<Seen>();
  auto rank1 = notice(store, seen);
  rank1->watch(true);
  std::this_thread::sleep_for(5 * kPoll);  // its thread is inside check now
  store->set(FailureNotice::kKey, "too late");
  const auto start = std::chrono::steady_clock::now();
  rank1.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  std::this_thread::sleep_for(2000ms);  // the check returns: the callback must not run
  EXPECT_EQ(seen->calls.load(), 0);
}

}  // namespace
}  // namespace tdist::backends::nccl
