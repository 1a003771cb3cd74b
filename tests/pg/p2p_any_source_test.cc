// Receiving from any source (ProcessGroup::irecv_any, recv_any, Work::source_rank) on the
// backend under test, ranks as threads: every rank sends rank 0 one message and rank 0 gets
// each sender once (worlds 2-4, a small and a 4 MiB message); receives of one source and of
// any on the same tag in posting order, tags apart; source_rank of other Works; a wrong
// count, the group timeout, an aborted peer and bad arguments.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Rank 0 receives world - 1 messages of `count` f32 from any source: one from each rank,
// each with its sender's pattern. `blocking`: through recv_any.
void every_sender_once(int world_size, size_t count, bool blocking) {
  ThreadWorld world(world_size);
  ASSERT_TRUE(world.ok());
  world.run([&](int rank, ProcessGroup& pg) {
    if (rank != 0) {
      Buffer out(DType::kF32, count);
      fill_pattern(out.data(), out.bytes(), 3, rank, 0);
      pg.send(out.data(), count, DType::kF32, 0, 7);
      return;
    }
    std::vector<int> seen(static_cast<size_t>(world_size), 0);
    for (int i = 1; i < world_size; ++i) {
      Buffer in(DType::kF32, count);
      int from = -1;
      if (blocking) {
        from = pg.recv_any(in.data(), count, DType::kF32, 7);
      } else {
        WorkPtr w = pg.irecv_any(in.data(), count, DType::kF32, 7);
        EXPECT_EQ(w->op(), "irecv_any");
        w->wait();
        from = w->source_rank();
      }
      ASSERT_TRUE(from >= 1 && from < world_size) << from;
      ++seen[static_cast<size_t>(from)];
      EXPECT_EQ(pattern_mismatch(in.data(), in.bytes(), 3, from, 0), -1) << "from " << from;
      EXPECT_TRUE(in.guards_intact());
    }
    for (int r = 1; r < world_size; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << r;
  });
}

TEST(AnySourceTest, EachSenderOnceSmallAndLarge) {
  for (int w : {2, 3, 4}) {
    for (size_t count : {size_t{2}, size_t{1} << 20}) {  // 8 B, 4 MiB (a rendezvous)
      SCOPED_TRACE(::testing::Message() << "world " << w << ", " << count << " f32");
      every_sender_once(w, count, /*blocking=*/count > 2);
    }
  }
}

// Rank 0 posts irecv_any(3), irecv(1, 3), irecv_any(4) before anything is sent: rank 1's
// two messages on tag 3 go to the first two in posting order, rank 2's on tag 4 to the
// third. source_rank is -1 until a receive completes, the src for irecv, and -1 for sends
// and collectives.
TEST(AnySourceTest, PostingOrderOnOneTagAndTagsApart) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([&](int rank, ProcessGroup& pg) {
    int32_t go = 0;
    if (rank != 0) {
      pg.recv(&go, 1, DType::kI32, 0, 9);
      std::vector<int32_t> v = {rank * 10, rank * 10 + 1};
      if (rank == 1) {
        pg.send(&v[0], 1, DType::kI32, 0, 3);
        pg.send(&v[1], 1, DType::kI32, 0, 3);
      } else {
        WorkPtr s = pg.isend(&v[0], 1, DType::kI32, 0, 4);
        s->wait();
        EXPECT_EQ(s->source_rank(), -1);
      }
    } else {
      int32_t a = -1, b = -1, c = -1;
      WorkPtr any3 = pg.irecv_any(&a, 1, DType::kI32, 3);
      WorkPtr of1 = pg.irecv(&b, 1, DType::kI32, 1, 3);
      WorkPtr any4 = pg.irecv_any(&c, 1, DType::kI32, 4);
      EXPECT_EQ(any3->source_rank(), -1);
      for (int r : {1, 2}) pg.send(&go, 1, DType::kI32, r, 9);
      for (WorkPtr* w : {&any3, &of1, &any4}) (*w)->wait();
      EXPECT_EQ(a, 10);
      EXPECT_EQ(any3->source_rank(), 1);
      EXPECT_EQ(b, 11);
      EXPECT_EQ(of1->source_rank(), 1);
      EXPECT_EQ(c, 20);
      EXPECT_EQ(any4->source_rank(), 2);
    }
    WorkPtr collective = pg.barrier();
    collective->wait();
    EXPECT_EQ(collective->source_rank(), -1);
  });
}

// A message of another count fails the receive as irecv's does (DesyncError naming both
// lengths); the next message still arrives.
TEST(AnySourceTest, WrongCountFailsLikeIrecv) {
  ThreadWorld world(2, seconds(3));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    Buffer buf(DType::kI32, 1000);
    if (rank == 1) {
      pg.send(buf.data(), 1000, DType::kI32, 0, 5);
      pg.send(buf.data(), 10, DType::kI32, 0, 5);
      return;
    }
    WorkPtr w = pg.irecv_any(buf.data(), 10, DType::kI32, 5);
    std::exception_ptr error;
    try {
      w->wait(Deadline::after(seconds(10)));
    } catch (...) {
      error = std::current_exception();
    }
    EXPECT_TRUE(is_a<DesyncError>(error)) << describe(error);
    EXPECT_TRUE(contains(describe(error), "4000 bytes")) << describe(error);
    EXPECT_TRUE(contains(describe(error), "irecv_any")) << describe(error);
    EXPECT_EQ(w->source_rank(), -1);
    EXPECT_EQ(pg.recv_any(buf.data(), 10, DType::kI32, 5), 1);
    EXPECT_TRUE(buf.guards_intact());
  });
}

// With no message the group timeout ends the receive with TimeoutError naming it.
TEST(AnySourceTest, GroupTimeoutIsTimeoutError) {
  ThreadWorld world(3, std::chrono::milliseconds(300));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    if (rank != 0) return;
    int32_t x = 0;
    WorkPtr w = pg.irecv_any(&x, 1, DType::kI32, 2);
    const auto start = Clock::now();
    std::string what;
    try {
      w->wait();
    } catch (const TimeoutError& e) {
      what = e.what();
    }
    EXPECT_TRUE(contains(what, "irecv_any")) << what;
    EXPECT_TRUE(contains(what, "any rank")) << what;
    EXPECT_LE(Clock::now() - start, seconds(5));
  });
}

// A peer that aborts fails a pending receive from any source with PeerError, as irecv.
TEST(AnySourceTest, AbortedPeerFailsThePendingReceive) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    int32_t x = 0;
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      pg.abort();
      return;
    }
    const auto start = Clock::now();
    WorkPtr w = pg.irecv_any(&x, 1, DType::kI32, 2);
    EXPECT_THROW(w->wait(Deadline::after(seconds(10))), PeerError);
    EXPECT_LE(Clock::now() - start, seconds(5));
  });
}

TEST(AnySourceTest, BadArgumentsAreInvalidArgument) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int, ProcessGroup& pg) {
    int32_t x = 0;
    EXPECT_THROW(pg.irecv_any(nullptr, 1, DType::kI32), InvalidArgument);
    EXPECT_THROW(pg.irecv_any(&x, 1, static_cast<DType>(200)), InvalidArgument);
    // A group of one has nobody to receive from.
    auto alone = pg.split(/*color=*/pg.rank(), /*key=*/0);
    ASSERT_NE(alone, nullptr);
    try {
      alone->irecv_any(&x, 1, DType::kI32);
      ADD_FAILURE() << "no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "alone in its group")) << e.what();
    }
    pg.barrier()->wait();
  });
}

}  // namespace
}  // namespace tdist::pg_test
