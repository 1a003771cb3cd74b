// Bad input to the "tcp" backend, ranks as threads.
//  - Invalid arguments (root, peer, null buffers, op for the dtype, counts lengths) throw
//    InvalidArgument from the call itself; issued on one rank only, so a call that sent
//    anything or took a sequence number would break the collective that follows.
//  - Ranks that disagree (counts, dtypes, reduce ops, roots, operations) get DesyncError on
//    every rank within 5 s, however long the group timeout, naming both sides' operations:
//    never a hang, never a write outside the buffers (guard bytes).
//  - abort() on one rank fails the others' pending operation with PeerError quickly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

void make_invalid_calls(int rank, ProcessGroup& pg) {
  const int w = pg.size();
  Buffer a(DType::kF64, 64), b(DType::kF64, 64 * static_cast<size_t>(w));
  uint8_t* p = a.data();
  uint8_t* q = b.data();
  const std::vector<size_t> short_counts(static_cast<size_t>(w - 1), 1);
  const std::vector<size_t> long_counts(static_cast<size_t>(w + 1), 1);
  std::vector<size_t> ok_counts(static_cast<size_t>(w), 1);
  std::vector<size_t> wrong_mine = ok_counts;
  wrong_mine[static_cast<size_t>(rank)] = 2;
  const DType f32 = DType::kF32;

  // Ops invalid for the dtype.
  EXPECT_THROW(pg.all_reduce(p, 4, f32, ReduceOpKind::kBand), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(p, 4, DType::kF64, ReduceOpKind::kBor), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(p, 4, DType::kBF16, ReduceOpKind::kBxor), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(p, 4, DType::kI32, ReduceOp::premul_sum(2.0)), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(p, 4, DType::kBool, ReduceOpKind::kAvg), InvalidArgument);
  EXPECT_THROW(pg.reduce(p, p, 4, DType::kF16, ReduceOpKind::kBand, 0), InvalidArgument);
  EXPECT_THROW(pg.reduce_scatter(q, p, 4, f32, ReduceOpKind::kBxor), InvalidArgument);
  // Roots out of range.
  for (int root : {-1, w, w + 7}) {
    EXPECT_THROW(pg.broadcast(p, 4, f32, root), InvalidArgument) << root;
    EXPECT_THROW(pg.reduce(p, p, 4, f32, ReduceOpKind::kSum, root), InvalidArgument) << root;
    EXPECT_THROW(pg.gather(p, q, 4, f32, root), InvalidArgument) << root;
    EXPECT_THROW(pg.scatter(q, p, 4, f32, root), InvalidArgument) << root;
  }
  // Null buffers with a non-zero count.
  EXPECT_THROW(pg.all_reduce(nullptr, 10, f32), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(nullptr, p, 10, f32, ReduceOpKind::kSum), InvalidArgument);
  EXPECT_THROW(pg.all_reduce(p, nullptr, 10, f32, ReduceOpKind::kSum), InvalidArgument);
  EXPECT_THROW(pg.broadcast(nullptr, 3, f32, 0), InvalidArgument);
  EXPECT_THROW(pg.reduce(nullptr, p, 3, f32, ReduceOpKind::kSum, 0), InvalidArgument);
  EXPECT_THROW(pg.all_gather(nullptr, q, 3, f32), InvalidArgument);
  EXPECT_THROW(pg.all_gather(p, nullptr, 3, f32), InvalidArgument);
  EXPECT_THROW(pg.reduce_scatter(nullptr, p, 3, f32, ReduceOpKind::kSum), InvalidArgument);
  EXPECT_THROW(pg.reduce_scatter(q, nullptr, 3, f32, ReduceOpKind::kSum), InvalidArgument);
  EXPECT_THROW(pg.all_to_all(nullptr, q, 3, f32), InvalidArgument);
  EXPECT_THROW(pg.all_to_all(q, nullptr, 3, f32), InvalidArgument);
  EXPECT_THROW(pg.gather(nullptr, q, 3, f32, 0), InvalidArgument);
  EXPECT_THROW(pg.all_gatherv(p, 1, nullptr, ok_counts, f32), InvalidArgument);
  EXPECT_THROW(pg.all_to_allv(nullptr, ok_counts, q, ok_counts, f32), InvalidArgument);
  EXPECT_THROW(pg.all_to_allv(q, ok_counts, nullptr, ok_counts, f32), InvalidArgument);
  if (rank == 0) {
    EXPECT_THROW(pg.gather(p, nullptr, 3, f32, 0), InvalidArgument);   // root needs recv
    EXPECT_THROW(pg.scatter(nullptr, p, 3, f32, 0), InvalidArgument);  // root needs send
    EXPECT_THROW(pg.reduce(p, nullptr, 3, f32, ReduceOpKind::kSum, 0), InvalidArgument);
  }
  // Counts of the wrong length, or disagreeing with this rank's own count.
  EXPECT_THROW(pg.all_gatherv(p, 1, q, short_counts, f32), InvalidArgument);
  EXPECT_THROW(pg.all_gatherv(p, 1, q, long_counts, f32), InvalidArgument);
  EXPECT_THROW(pg.all_gatherv(p, 1, q, wrong_mine, f32), InvalidArgument);
  EXPECT_THROW(pg.all_to_allv(p, short_counts, q, ok_counts, f32), InvalidArgument);
  EXPECT_THROW(pg.all_to_allv(p, ok_counts, q, long_counts, f32), InvalidArgument);
  // Peers out of range or self.
  for (int peer : {-1, w, rank}) {
    EXPECT_THROW(pg.isend(p, 1, f32, peer), InvalidArgument) << peer;
    EXPECT_THROW(pg.irecv(p, 1, f32, peer), InvalidArgument) << peer;
  }
  // Sub-groups with bad ranks.
  EXPECT_THROW(pg.new_group({}), InvalidArgument);
  EXPECT_THROW(pg.new_group({0, w}), InvalidArgument);
  EXPECT_THROW(pg.new_group({0, 0}), InvalidArgument);
  EXPECT_TRUE(a.guards_intact() && b.guards_intact());
}

TEST(BadInputTest, InvalidArgumentsThrowAtTheCallAndLeaveTheGroupWorking) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    // Only one rank at a time makes the bad calls; then everyone runs collectives.
    for (int culprit = 0; culprit < pg.size(); ++culprit) {
      if (rank == culprit) make_invalid_calls(rank, pg);
      int64_t v = rank + 1;
      pg.all_reduce(&v, 1, DType::kI64)->wait();
      EXPECT_EQ(v, 6) << "after rank " << culprit << "'s invalid calls";
      int32_t data[3] = {rank, rank, rank};
      pg.broadcast(data, 3, DType::kI32, 2)->wait();
      EXPECT_EQ(data[1], 2);
    }
  });
}

// ---- ranks that disagree --------------------------------------------------------------

// A group timeout far beyond the test's bounds: the fingerprints, not the timeout, must end
// every mismatch.
constexpr auto kLongTimeout = std::chrono::seconds(60);
constexpr auto kDetectWithin = std::chrono::seconds(5);

// Runs issue(rank, pg, x, y) on 2 ranks: every rank must fail with DesyncError within 5 s,
// its text naming both sides (`side0` and `side1`, e.g. "rank 0 called all_reduce #0 f32
// x10 sum"), with the guard bytes intact; later collectives fail at once with it too. With
// `first_may_succeed` (a mismatch no message of the operation itself reveals: both ranks
// only send), the operation may succeed, and the next collective must then fail so.
void expect_desync(size_t buffer_bytes,
                   const std::function<WorkPtr(int, ProcessGroup&, Buffer&, Buffer&)>& issue,
                   const std::string& side0, const std::string& side1,
                   bool first_may_succeed = false) {
  ThreadWorld world(2, kLongTimeout);
  ASSERT_TRUE(world.ok());
  world.run([&](int rank, ProcessGroup& pg) {
    Buffer x(DType::kU8, buffer_bytes), y(DType::kU8, buffer_bytes);
    const auto start = Clock::now();
    auto wait_for_error = [&](const WorkPtr& work) {
      try {
        work->wait(Deadline::after(kDetectWithin + std::chrono::seconds(5)));
      } catch (...) {
        return std::current_exception();
      }
      return std::exception_ptr();
    };
    WorkPtr work = issue(rank, pg, x, y);
    std::exception_ptr error = wait_for_error(work);
    ASSERT_TRUE(work->is_completed())
        << "rank " << rank << ": the mismatched " << work->op() << " still runs";
    if (error == nullptr && first_may_succeed) {
      int32_t v = 1;
      error = wait_for_error(pg.all_reduce(&v, 1, DType::kI32));
    }
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    ASSERT_TRUE(is_a<DesyncError>(error)) << "rank " << rank << ": got " << describe(error);
    const std::string text = describe(error);
    EXPECT_NE(text.find(side0), std::string::npos) << "rank " << rank << ": " << text;
    EXPECT_NE(text.find(side1), std::string::npos) << "rank " << rank << ": " << text;
    EXPECT_LE(elapsed, kDetectWithin) << "rank " << rank << ": " << text;
    EXPECT_TRUE(x.guards_intact() && y.guards_intact()) << "rank " << rank;
    int32_t v = 1;
    EXPECT_THROW(pg.all_reduce(&v, 1, DType::kI32)->wait(), DesyncError) << "rank " << rank;
  });
}

TEST(MismatchTest, AllReduceCounts10And20) {
  expect_desync(
      4 * 20,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        const size_t count = rank == 0 ? 10 : 20;
        return pg.all_reduce(x.data(), y.data(), count, DType::kF32, ReduceOpKind::kSum);
      },
      "rank 0 called all_reduce #0 f32 x10 sum", "rank 1 called all_reduce #0 f32 x20 sum");
}

TEST(MismatchTest, AllReduceCounts1KiAnd2Ki) {
  expect_desync(
      4 * 2048,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.all_reduce(x.data(), rank == 0 ? 1024 : 2048, DType::kF32);
      },
      "rank 0 called all_reduce #0 f32 x1024 sum", "rank 1 called all_reduce #0 f32 x2048 sum");
}

// The larger side used to wait for the group timeout while the smaller one "succeeded".
TEST(MismatchTest, AllReduceCounts1MAnd2M) {
  expect_desync(
      4 << 21,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.all_reduce(x.data(), size_t{1} << (rank == 0 ? 20 : 21), DType::kF32);
      },
      "rank 0 called all_reduce #0 f32 x1048576 sum", "rank 1 called all_reduce #0 f32 x2097152");
}

TEST(MismatchTest, AllReduceDtypesF32AndF64) {
  expect_desync(
      8 << 20,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.all_reduce(x.data(), 1 << 20, rank == 0 ? DType::kF32 : DType::kF64);
      },
      "all_reduce #0 f32 x1048576 sum", "all_reduce #0 f64 x1048576 sum");
}

// Same width, same count: only the fingerprint tells them apart.
TEST(MismatchTest, AllReduceDtypesI32AndF32) {
  expect_desync(
      4 * 256,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.all_reduce(x.data(), 256, rank == 0 ? DType::kI32 : DType::kF32);
      },
      "rank 0 called all_reduce #0 i32 x256 sum", "rank 1 called all_reduce #0 f32 x256 sum");
}

TEST(MismatchTest, AllReduceSumAndMax) {
  expect_desync(
      4 * 1024,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.all_reduce(x.data(), 1024, DType::kF32,
                             rank == 0 ? ReduceOpKind::kSum : ReduceOpKind::kMax);
      },
      "rank 0 called all_reduce #0 f32 x1024 sum", "rank 1 called all_reduce #0 f32 x1024 max");
}

TEST(MismatchTest, AllGatherCounts) {
  expect_desync(
      4 * 2 * 300,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        return pg.all_gather(x.data(), y.data(), rank == 0 ? 300 : 7, DType::kF32);
      },
      "all_gather #0 f32 x300", "all_gather #0 f32 x7");
}

// Rank 0 names root 0 and rank 1 root 1: both only send. Each finds the other's message
// waiting when its next collective begins (or arrives during it), unexpected for good.
TEST(MismatchTest, BroadcastRootsFailAtTheNextCollective) {
  expect_desync(
      4 * 500,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        return pg.broadcast(x.data(), 500, DType::kI32, rank);
      },
      "broadcast #0 i32 x500 root 0", "broadcast #0 i32 x500 root 1", /*first_may_succeed=*/true);
}

// The same, and the broadcast itself fails on one rank at least: a root that only sent
// reads what has arrived before it returns (Comm::check_arrivals), and of two roots the one
// that sent last finds the other's message there. At 1 Ki and 1 Mi elements; scatter too.
void expect_root_named_at_the_call(bool scatter, size_t count) {
  ThreadWorld world(2, kLongTimeout);
  ASSERT_TRUE(world.ok());
  std::atomic<int> failed_at_the_call{0};
  world.run([&](int rank, ProcessGroup& pg) {
    std::vector<int32_t> x(2 * count, rank);
    std::vector<int32_t> y(count);
    const auto start = Clock::now();
    std::exception_ptr error;
    try {
      (scatter ? pg.scatter(x.data(), y.data(), count, DType::kI32, rank)
               : pg.broadcast(x.data(), count, DType::kI32, rank))
          ->wait(Deadline::after(kDetectWithin));
    } catch (...) {
      error = std::current_exception();
      failed_at_the_call += 1;
    }
    if (error == nullptr) {
      try {
        pg.barrier()->wait(Deadline::after(kDetectWithin));
      } catch (...) {
        error = std::current_exception();
      }
    }
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    ASSERT_TRUE(is_a<DesyncError>(error)) << "rank " << rank << ": got " << describe(error);
    const std::string text = describe(error);
    const std::string op = std::string(scatter ? "scatter" : "broadcast") + " #0 i32 x" +
                           std::to_string(count) + " root ";
    EXPECT_NE(text.find("rank 0 called " + op + "0"), std::string::npos) << text;
    EXPECT_NE(text.find("rank 1 called " + op + "1"), std::string::npos) << text;
    EXPECT_LE(elapsed, kDetectWithin) << "rank " << rank << ": " << text;
  });
  EXPECT_GE(failed_at_the_call.load(), 1);
}

TEST(MismatchTest, BroadcastRootsAreNamedAtTheBroadcast1Ki) {
  expect_root_named_at_the_call(/*scatter=*/false, 1024);
}
TEST(MismatchTest, BroadcastRootsAreNamedAtTheBroadcast1Mi) {
  expect_root_named_at_the_call(/*scatter=*/false, size_t{1} << 20);
}
TEST(MismatchTest, ScatterRootsAreNamedAtTheScatter) {
  expect_root_named_at_the_call(/*scatter=*/true, 1024);
}

// Each rank names itself the root of a reduce (or gather): both wait to receive, nobody
// sends. The waiting receive probes its peer after a second (Engine::kProbeAfter), and the
// peer, in the same collective under another root, names the desync.
TEST(MismatchTest, ReduceRootsBothWaitingAreNamed) {
  expect_desync(
      4 * 1024,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        return pg.reduce(x.data(), y.data(), 1024, DType::kI32, ReduceOpKind::kSum, rank);
      },
      "rank 0 called reduce #0 i32 x1024 sum root 0",
      "rank 1 called reduce #0 i32 x1024 sum root 1");
}

TEST(MismatchTest, ReduceRootsBothWaitingAreNamed1Mi) {
  expect_desync(
      4 << 20,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        return pg.reduce(x.data(), y.data(), 1 << 20, DType::kI32, ReduceOpKind::kSum, rank);
      },
      "rank 0 called reduce #0 i32 x1048576 sum root 0",
      "rank 1 called reduce #0 i32 x1048576 sum root 1");
}

TEST(MismatchTest, GatherRootsBothWaitingAreNamed) {
  expect_desync(
      4 * 2 * 256,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        return pg.gather(x.data(), y.data(), 256, DType::kI32, rank);
      },
      "rank 0 called gather #0 i32 x256 root 0", "rank 1 called gather #0 i32 x256 root 1");
}

TEST(MismatchTest, AllReduceAgainstBroadcast) {
  expect_desync(
      4 * 1024,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer&) {
        if (rank == 0) return pg.all_reduce(x.data(), 1024, DType::kF32);
        return pg.broadcast(x.data(), 1024, DType::kF32, 0);
      },
      "rank 0 called all_reduce #0 f32 x1024 sum", "rank 1 called broadcast #0 f32 x1024 root 0");
}

TEST(MismatchTest, DifferentOperations) {
  expect_desync(
      4 * 2 * 64,
      [](int rank, ProcessGroup& pg, Buffer& x, Buffer& y) {
        if (rank == 0) return pg.all_reduce(x.data(), 64, DType::kF32);
        return pg.all_gather(x.data(), y.data(), 64, DType::kF32);
      },
      "rank 0 called all_reduce #0 f32 x64 sum", "rank 1 called all_gather #0 f32 x64");
}

// ---- timeout --------------------------------------------------------------------------

TEST(TimeoutTest, AnAbsentPeerEndsTheOperationWithTimeoutErrorAtTheGroupTimeout) {
  constexpr auto kTimeout = std::chrono::milliseconds(1000);
  ThreadWorld world(2, kTimeout);
  ASSERT_TRUE(world.ok());
  world.run([&](int rank, ProcessGroup& pg) {
    std::vector<float> data(100, 1.0f);
    if (rank == 1) {
      std::this_thread::sleep_for(kTimeout * 2);  // never joins rank 0's all_reduce
      return;
    }
    const auto start = Clock::now();
    WorkPtr w = pg.all_reduce(data.data(), data.size(), DType::kF32);
    EXPECT_THROW(w->wait(Deadline::after(std::chrono::seconds(10))), TimeoutError);
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, kTimeout - std::chrono::milliseconds(50));
    EXPECT_LE(elapsed, kTimeout + std::chrono::seconds(2));
  });
}

// ---- abort ----------------------------------------------------------------------------

TEST(AbortTest, AbortOnOneRankFailsThePeersPendingAllReduceWithPeerError) {
  ThreadWorld world(3, std::chrono::minutes(10));
  ASSERT_TRUE(world.ok());
  std::atomic<int64_t> abort_ns{0};
  world.run([&](int rank, ProcessGroup& pg) {
    std::vector<float> data(1000, 1.0f);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others wait
      abort_ns = Clock::now().time_since_epoch().count();
      pg.abort();
      EXPECT_THROW(pg.all_reduce(data.data(), data.size(), DType::kF32)->wait(), PeerError);
      return;
    }
    WorkPtr w = pg.all_reduce(data.data(), data.size(), DType::kF32);
    std::exception_ptr error;
    try {
      w->wait(Deadline::after(std::chrono::seconds(15)));
    } catch (...) {
      error = std::current_exception();
    }
    const auto now = Clock::now().time_since_epoch().count();
    EXPECT_TRUE(is_a<PeerError>(error)) << "rank " << rank << ": " << describe(error);
    EXPECT_LE(now - abort_ns.load(), int64_t{5'000'000'000}) << "rank " << rank;
    // Later operations fail at once.
    const auto start = Clock::now();
    EXPECT_THROW(pg.all_reduce(data.data(), data.size(), DType::kF32)->wait(), PeerError);
    EXPECT_LE(Clock::now() - start, std::chrono::seconds(1));
  });
}

}  // namespace
}  // namespace tdist::pg_test
