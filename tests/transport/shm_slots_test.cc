// Slots (comm.h's "Slots"): the small all-gather through shared memory that all_reduce
// and barrier use on one host. Every rank gets every block, call after call with no other
// synchronisation (the two slots alternate); ranks whose operations differ get a
// DesyncError whether both use slots or only one does; a peer that aborts, leaves or never
// comes ends the wait with PeerError or TimeoutError; a waiter that sleeps (a background
// thread, or one whose peer comes late) is woken, also while another thread drives the
// Comm; the slots all_reduce gives the reference's bits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/barrier.h"
#include "collectives/coll_test_util.h"
#include "core/op_fingerprint.h"
#include "core/polling.h"
#include "shm_test_util.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;
using tdist::core::OpFingerprint;
using tdist::core::OpKind;

ConnectFn shm_connect() {
  return [](std::shared_ptr<Store> store, int rank, int world) {
    return connect_shm_comm(std::move(store), rank, world, shm_options());
  };
}

Deadline soon() { return Deadline::after(20s); }

OpFingerprint all_reduce_fp(size_t count) {
  return OpFingerprint::make(OpKind::kAllReduce, DType::kF32, count, ReduceOpKind::kSum);
}

// Rank r's block of round `round`: `bytes` bytes of a pattern of both.
std::vector<uint8_t> block_of(int rank, int round, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(rank * 31 + round * 7 + i);
  return b;
}

TEST(ShmSlotsTest, EveryRankGetsEveryBlockCallAfterCall) {
  for (int world : {2, 3}) {
    run_comm_ranks(world, shm_connect(), [&](Comm& comm) {
      ASSERT_EQ(comm.slot_bytes(), 4096u);
      std::vector<const void*> blocks(static_cast<size_t>(world));
      for (int round = 0; round < 300; ++round) {
        const size_t bytes = (static_cast<size_t>(round) * 97) % 4097;  // 0 to 4096
        comm.begin_collective(static_cast<uint64_t>(round), all_reduce_fp(bytes));
        const auto mine = block_of(comm.rank(), round, bytes);
        comm.slot_gather(collective_tag(static_cast<uint64_t>(round), 0), mine.data(), bytes,
                         blocks.data(), soon());
        for (int r = 0; r < world; ++r) {
          const auto want = block_of(r, round, bytes);
          ASSERT_EQ(std::memcmp(blocks[static_cast<size_t>(r)], want.data(), bytes), 0)
              << "rank " << comm.rank() << " round " << round << " block of rank " << r;
        }
      }
    });
  }
}

TEST(ShmSlotsTest, TooLargeABlockIsInvalidArgumentBeforeAnythingIsPosted) {
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    std::vector<uint8_t> big(4097);
    const void* blocks[2];
    const std::string what = error_of<InvalidArgument>(
        [&] { comm.slot_gather(collective_tag(0, 0), big.data(), big.size(), blocks, soon()); });
    EXPECT_NE(what.find("slots of this Comm hold 4096"), std::string::npos) << what;
    // Nothing was posted: an exchange of the right size still pairs up.
    comm.slot_gather(collective_tag(1, 0), big.data(), 8, blocks, soon());
  });
}

// Both ranks use slots, for different operations: each names both.
TEST(ShmSlotsTest, DifferentOperationsInTheSlotsAreADesyncOnBothRanks) {
  std::vector<std::string> whats(2);
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    const size_t count = comm.rank() == 0 ? 4 : 8;
    comm.begin_collective(5, all_reduce_fp(count));
    std::vector<uint8_t> data(count * 4);
    const void* blocks[2];
    whats[static_cast<size_t>(comm.rank())] = error_of<DesyncError>(
        [&] { comm.slot_gather(collective_tag(5, 0), data.data(), data.size(), blocks, soon()); });
  });
  for (const std::string& what : whats) {
    EXPECT_NE(what.find("rank 0 called all_reduce #5 f32 x4 sum"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 called all_reduce #5 f32 x8 sum"), std::string::npos) << what;
  }
}

// Rank 1 runs the collective with messages (a larger count) while rank 0 waits in its
// slot: rank 0 reads rank 1's message as it arrives and names the desync; rank 1 learns it
// from rank 0's abort notice.
TEST(ShmSlotsTest, APeerThatSendsMessagesInsteadIsADesyncWhileTheSlotWaits) {
  std::vector<std::string> whats(2);
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    const uint64_t tag = collective_tag(3, 0);
    auto fail = [&](const std::exception_ptr& e) { comm.abort(e); };
    if (comm.rank() == 0) {
      comm.begin_collective(3, all_reduce_fp(2));
      float data[2] = {};
      const void* blocks[2];
      whats[0] = error_of<DesyncError>([&] {
        try {
          comm.slot_gather(tag, data, sizeof(data), blocks, soon());
        } catch (...) {
          fail(std::current_exception());
          throw;
        }
      });
    } else {
      comm.begin_collective(3, all_reduce_fp(5000));
      std::vector<float> data(5000);
      whats[1] = error_of<DesyncError>([&] {
        auto send = comm.isend(0, tag, data.data(), data.size() * 4);
        auto recv = comm.irecv(0, tag, data.data(), data.size() * 4);
        recv->wait(soon());
      });
    }
  });
  for (const std::string& what : whats) {
    EXPECT_NE(what.find("all_reduce #3 f32 x2 sum"), std::string::npos) << what;
    EXPECT_NE(what.find("all_reduce #3 f32 x5000 sum"), std::string::npos) << what;
  }
}

TEST(ShmSlotsTest, APeerThatAbortsEndsTheWaitWithItsReason) {
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    const void* blocks[2];
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(50ms);
      comm.abort(std::make_exception_ptr(PeerError("rank 1 gives up")));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::string what = error_of<PeerError>(
        [&] { comm.slot_gather(collective_tag(0, 0), nullptr, 0, blocks, soon()); });
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    EXPECT_NE(what.find("rank 1 gives up"), std::string::npos) << what;
  });
}

TEST(ShmSlotsTest, APeerThatLeavesEndsTheWaitWithPeerError) {
  auto store = std::make_shared<HashStore>();
  std::string what;
  std::thread leaver([&] { connect_shm_comm(store, 1, 2, shm_options()).reset(); });
  auto comm = connect_shm_comm(store, 0, 2, shm_options());
  leaver.join();
  const void* blocks[2];
  what = error_of<PeerError>(
      [&] { comm->slot_gather(collective_tag(0, 0), nullptr, 0, blocks, soon()); });
  EXPECT_NE(what.find("rank 1 destroyed its Comm"), std::string::npos) << what;
}

TEST(ShmSlotsTest, APeerThatNeverComesIsATimeoutNamingIt) {
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(600ms);  // past rank 0's deadline; then leaves
      return;
    }
    comm.begin_collective(9, OpFingerprint::make(OpKind::kBarrier));
    const void* blocks[2];
    const std::string what = error_of<TimeoutError>([&] {
      comm.slot_gather(collective_tag(9, 0), nullptr, 0, blocks, Deadline::after(200ms));
    });
    EXPECT_NE(what.find("rank 1's part of barrier #9"), std::string::npos) << what;
  });
}

// A background thread never polls: it sleeps in poll() at once, and the peer's post must
// wake it (no lost wake-up), round after round, with the peer late by 0-2 ms.
TEST(ShmSlotsTest, ASleepingWaiterIsWokenByThePost) {
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    const tdist::core::BackgroundThread background;
    const void* blocks[2];
    for (int round = 0; round < 40; ++round) {
      if (comm.rank() == round % 2)
        std::this_thread::sleep_for(std::chrono::microseconds(50 * round));
      const int mine = comm.rank() + round;
      comm.slot_gather(collective_tag(static_cast<uint64_t>(round), 0), &mine, sizeof(mine), blocks,
                       Deadline::after(5s));
      for (int r = 0; r < 2; ++r) {
        int got = 0;
        std::memcpy(&got, blocks[r], sizeof(got));
        ASSERT_EQ(got, r + round);
      }
    }
  });
}

// Another thread of rank 0 drives the Comm (it waits for a point-to-point message) while
// rank 0's slot exchange waits: the driver tells the exchange when the peer's block came.
TEST(ShmSlotsTest, AnExchangeWaitingWhileAnotherThreadDrivesCompletes) {
  run_comm_ranks(2, shm_connect(), [&](Comm& comm) {
    const void* blocks[2];
    int value = 0;
    if (comm.rank() == 0) {
      std::atomic<bool> receiving{false};
      std::thread driver([&] {
        auto recv = comm.irecv(1, p2p_tag(1), &value, sizeof(value));
        receiving = true;
        recv->wait(soon());
      });
      while (!receiving) std::this_thread::yield();
      std::this_thread::sleep_for(5ms);  // the driver sleeps in poll() by now
      comm.slot_gather(collective_tag(0, 0), nullptr, 0, blocks, Deadline::after(5s));
      driver.join();
      EXPECT_EQ(value, 42);
    } else {
      std::this_thread::sleep_for(30ms);
      comm.slot_gather(collective_tag(0, 0), nullptr, 0, blocks, Deadline::after(5s));
      value = 42;
      comm.isend(0, p2p_tag(1), &value, sizeof(value))->wait(soon());
    }
  });
}

// all_reduce through the slots: every op and dtype the reference folds, in place and out,
// on 2 and 3 ranks; premul_sum scales each rank's own block; avg divides.
TEST(ShmSlotsTest, AllReduceThroughTheSlotsMatchesTheReference) {
  using tdist::testing::compare;
  using tdist::testing::make_input;
  using tdist::testing::reference_reduce;
  for (int world : {2, 3}) {
    run_comm_ranks(world, shm_connect(), [&](Comm& comm) {
      uint64_t seq = 0;
      for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kBF16}) {
        for (ReduceOpKind kind : {ReduceOpKind::kSum, ReduceOpKind::kMax, ReduceOpKind::kProd}) {
          for (size_t count : {size_t{1}, size_t{7}, 4096 / dtype_size(dtype)}) {
            const ReduceOp op(kind);
            const auto want = reference_reduce(world, count, dtype, op);
            auto data = make_input(comm.rank(), count, dtype, kind);
            std::vector<uint8_t> out(data.size());
            coll::Algorithm chosen = coll::Algorithm::kAuto;
            coll::Ctx ctx{comm, seq++, soon(), {}, &chosen};
            coll::all_reduce(ctx, data.data(), out.data(), count, dtype, op);
            ASSERT_EQ(chosen, coll::Algorithm::kSlots);
            auto bad = compare(dtype, out.data(), want.data(), count);
            ASSERT_FALSE(bad) << dtype_name(dtype) << " " << reduce_op_name(kind) << " x" << count
                              << " world " << world << ": " << *bad;
            coll::all_reduce(coll::Ctx{comm, seq++, soon()}, data.data(), data.data(), count, dtype,
                             op);
            bad = compare(dtype, data.data(), want.data(), count);
            ASSERT_FALSE(bad) << "in place: " << dtype_name(dtype) << " " << reduce_op_name(kind);
          }
        }
      }
      // avg and premul_sum (rank r scales by r + 1): 1 + 2 (+ 3) times the input's 1s.
      std::vector<float> v(5, 1.0f);
      coll::all_reduce(coll::Ctx{comm, seq++, soon()}, v.data(), v.data(), v.size(), DType::kF32,
                       ReduceOp(ReduceOpKind::kAvg));
      EXPECT_EQ(v[4], 1.0f);
      coll::all_reduce(coll::Ctx{comm, seq++, soon()}, v.data(), v.data(), v.size(), DType::kF32,
                       ReduceOp::premul_sum(static_cast<double>(comm.rank() + 1)));
      EXPECT_EQ(v[0], world == 2 ? 3.0f : 6.0f);
      coll::Algorithm chosen = coll::Algorithm::kAuto;
      coll::barrier(coll::Ctx{comm, seq++, soon(), {}, &chosen});
      EXPECT_EQ(chosen, coll::Algorithm::kSlots);
    });
  }
}

}  // namespace
}  // namespace tdist::transport::testing
