// Point-to-point and asynchronous completion of the "tcp" backend, ranks as threads:
// tags matched out of order, equal tags in order, batch_isend_irecv ring exchanges,
// sends to self rejected; many collectives in flight waited in reverse order, and the
// Work state (is_completed, is_success, exception); WaitsAtOnce.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

std::vector<int32_t> payload(uint32_t tag, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(tag * 100000 + i);
  return v;
}

TEST(P2PTest, TagsAreMatchedOutOfOrder) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    // Sizes differ per tag, so a receive matched to the wrong tag fails or shows.
    auto size_of = [](uint32_t tag) { return static_cast<size_t>(tag) * 1000 + 1; };
    if (rank == 0) {
      std::vector<std::vector<int32_t>> data;
      std::vector<WorkPtr> sends;
      for (uint32_t tag : {1u, 2u, 3u}) data.push_back(payload(tag, size_of(tag)));
      for (uint32_t tag : {1u, 2u, 3u}) {
        sends.push_back(pg.isend(data[tag - 1].data(), size_of(tag), DType::kI32, 1, tag));
      }
      for (WorkPtr& w : sends) w->wait();
    } else {
      std::vector<std::vector<int32_t>> got(4);
      std::vector<WorkPtr> recvs;
      for (uint32_t tag : {3u, 2u, 1u}) {
        got[tag].assign(size_of(tag), -1);
        recvs.push_back(pg.irecv(got[tag].data(), size_of(tag), DType::kI32, 0, tag));
      }
      for (WorkPtr& w : recvs) w->wait();
      for (uint32_t tag : {1u, 2u, 3u}) EXPECT_EQ(got[tag], payload(tag, size_of(tag))) << tag;
    }
  });
}

TEST(P2PTest, EqualTagsArriveInSendOrderAndZeroCountsWork) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    constexpr int kMessages = 8;
    if (rank == 1) {
      for (int m = 0; m < kMessages; ++m) {
        std::vector<int32_t> v = payload(static_cast<uint32_t>(m), 100);
        pg.send(v.data(), v.size(), DType::kI32, 0, 7);
      }
      pg.send(nullptr, 0, DType::kF32, 0, 9);  // zero elements, null buffer
    } else {
      std::vector<std::vector<int32_t>> got(kMessages, std::vector<int32_t>(100, -1));
      std::vector<WorkPtr> recvs;
      for (int m = 0; m < kMessages; ++m) {
        recvs.push_back(pg.irecv(got[static_cast<size_t>(m)].data(), 100, DType::kI32, 1, 7));
      }
      pg.recv(nullptr, 0, DType::kF32, 1, 9);
      for (WorkPtr& w : recvs) w->wait();
      for (int m = 0; m < kMessages; ++m) {
        EXPECT_EQ(got[static_cast<size_t>(m)], payload(static_cast<uint32_t>(m), 100)) << m;
      }
    }
  });
}

TEST(P2PTest, BatchIsendIrecvRingExchange) {
  for (int w : {2, 4}) {
    ThreadWorld world(w);
    ASSERT_TRUE(world.ok());
    world.run([](int rank, ProcessGroup& pg) {
      const int n = pg.size();
      const int right = (rank + 1) % n;
      const int left = (rank + n - 1) % n;
      constexpr size_t kCount = 4099;
      Buffer to_right(DType::kF32, kCount), to_left(DType::kF32, kCount);
      Buffer from_left(DType::kF32, kCount), from_right(DType::kF32, kCount);
      fill_pattern(to_right.data(), to_right.bytes(), 5, rank, right);
      fill_pattern(to_left.data(), to_left.bytes(), 6, rank, left);
      // Both directions, with distinct tags (with two ranks left == right).
      std::vector<P2POp> ops = {
          {P2POp::Kind::kRecv, from_left.data(), kCount, DType::kF32, left, 1},
          {P2POp::Kind::kSend, to_right.data(), kCount, DType::kF32, right, 1},
          {P2POp::Kind::kSend, to_left.data(), kCount, DType::kF32, left, 2},
          {P2POp::Kind::kRecv, from_right.data(), kCount, DType::kF32, right, 2},
      };
      pg.batch_isend_irecv(ops)->wait();
      EXPECT_EQ(pattern_mismatch(from_left.data(), from_left.bytes(), 5, left, rank), -1);
      EXPECT_EQ(pattern_mismatch(from_right.data(), from_right.bytes(), 6, right, rank), -1);
      EXPECT_TRUE(from_left.guards_intact() && from_right.guards_intact());
    });
  }
}

TEST(P2PTest, LargeMessagesBothWaysAtOnce) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    constexpr size_t kCount = (size_t{1} << 22) + 1;  // 16 MiB of f32 each way
    const int peer = 1 - rank;
    Buffer out(DType::kF32, kCount), in(DType::kF32, kCount);
    fill_pattern(out.data(), out.bytes(), 11, rank, peer);
    // Both ranks send before they receive: the transport must not deadlock on it.
    WorkPtr s = pg.isend(out.data(), kCount, DType::kF32, peer, 4);
    WorkPtr r = pg.irecv(in.data(), kCount, DType::kF32, peer, 4);
    s->wait();
    r->wait();
    EXPECT_EQ(pattern_mismatch(in.data(), in.bytes(), 11, peer, rank), -1);
    EXPECT_TRUE(in.guards_intact());
  });
}

TEST(P2PTest, ReceiveOfAnotherSizeFailsWithoutOverrunningTheBuffer) {
  ThreadWorld world(2, seconds(3));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    Buffer buf(DType::kI32, 1000);
    std::exception_ptr error;
    const auto start = Clock::now();
    WorkPtr w = rank == 0 ? pg.isend(buf.data(), 1000, DType::kI32, 1, 5)
                          : pg.irecv(buf.data(), 10, DType::kI32, 0, 5);
    try {
      w->wait(Deadline::after(seconds(10)));
    } catch (...) {
      error = std::current_exception();
    }
    EXPECT_TRUE(w->is_completed()) << "rank " << rank;
    if (rank == 1) {
      EXPECT_TRUE(is_a<DesyncError>(error) || is_a<PeerError>(error)) << describe(error);
    }
    EXPECT_LE(Clock::now() - start, seconds(6)) << "rank " << rank;
    EXPECT_TRUE(buf.guards_intact()) << "rank " << rank;
  });
}

TEST(P2PTest, SendToSelfAndBadPeersAreInvalidArguments) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    int32_t x = 0;
    EXPECT_THROW(pg.isend(&x, 1, DType::kI32, rank), InvalidArgument);
    EXPECT_THROW(pg.irecv(&x, 1, DType::kI32, rank), InvalidArgument);
    EXPECT_THROW(pg.isend(&x, 1, DType::kI32, 3), InvalidArgument);
    EXPECT_THROW(pg.irecv(&x, 1, DType::kI32, -1), InvalidArgument);
    EXPECT_THROW(pg.isend(nullptr, 1, DType::kI32, (rank + 1) % 3), InvalidArgument);
    P2POp self{P2POp::Kind::kSend, &x, 1, DType::kI32, rank, 0};
    EXPECT_THROW(pg.batch_isend_irecv(std::span<const P2POp>(&self, 1)), InvalidArgument);
    // The group still works.
    pg.barrier()->wait();
    int32_t v = rank;
    pg.all_reduce(&v, 1, DType::kI32)->wait();
    EXPECT_EQ(v, 0 + 1 + 2);
  });
}

TEST(AsyncTest, TenAllReducesInFlightWaitedInReverseOrder) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    constexpr int kOps = 10;
    constexpr size_t kCount = 50000;
    std::vector<std::vector<int64_t>> data(kOps);
    std::vector<WorkPtr> works;
    for (int k = 0; k < kOps; ++k) {
      data[static_cast<size_t>(k)].assign(kCount, int64_t{k} * 1000 + rank);
      works.push_back(pg.all_reduce(data[static_cast<size_t>(k)].data(), kCount, DType::kI64));
    }
    for (int k = kOps - 1; k >= 0; --k) {
      works[static_cast<size_t>(k)]->wait();
      EXPECT_TRUE(works[static_cast<size_t>(k)]->is_completed());
      EXPECT_TRUE(works[static_cast<size_t>(k)]->is_success());
      EXPECT_EQ(works[static_cast<size_t>(k)]->exception(), nullptr);
      const int64_t want = 3 * (int64_t{k} * 1000) + 0 + 1 + 2;
      EXPECT_EQ(data[static_cast<size_t>(k)].front(), want) << "op " << k;
      EXPECT_EQ(data[static_cast<size_t>(k)].back(), want) << "op " << k;
    }
  });
}

TEST(AsyncTest, IsCompletedBecomesTrueWithoutWait) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::vector<float> a(100000, 1.0f);
    std::vector<float> b(100000, static_cast<float>(rank));
    std::vector<float> g(200000, 0.0f);
    int32_t p = rank;
    std::vector<WorkPtr> works = {
        pg.all_reduce(a.data(), a.size(), DType::kF32),
        pg.all_gather(b.data(), g.data(), 100000, DType::kF32), pg.barrier(),
        rank == 0 ? pg.isend(&p, 1, DType::kI32, 1) : pg.irecv(&p, 1, DType::kI32, 0),
        pg.all_reduce(nullptr, 0, DType::kF32, ReduceOpKind::kSum)};
    const auto deadline = Clock::now() + seconds(20);
    for (WorkPtr& w : works) {
      while (!w->is_completed() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_TRUE(w->is_completed()) << w->op() << " never completed without wait()";
      EXPECT_TRUE(w->is_success()) << w->op();
      EXPECT_EQ(w->exception(), nullptr) << w->op() << ": " << describe(w->exception());
    }
    EXPECT_EQ(a[99999], 2.0f);
    EXPECT_EQ(g[99999], 0.0f);
    EXPECT_EQ(g[100000], 1.0f);
    EXPECT_EQ(p, 0);
  });
}

TEST(AsyncTest, ZeroCountsWithNullBuffersCompleteForEveryCollective) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    const std::vector<size_t> zeros(3, 0);
    const DType t = DType::kF32;
    const ReduceOp sum = ReduceOpKind::kSum;
    std::vector<WorkPtr> works = {pg.all_reduce(nullptr, nullptr, 0, t, sum),
                                  pg.broadcast(nullptr, 0, t, 1),
                                  pg.reduce(nullptr, nullptr, 0, t, sum, 2),
                                  pg.all_gather(nullptr, nullptr, 0, t),
                                  pg.all_gatherv(nullptr, 0, nullptr, zeros, t),
                                  pg.gather(nullptr, nullptr, 0, t, 0),
                                  pg.scatter(nullptr, nullptr, 0, t, 1),
                                  pg.reduce_scatter(nullptr, nullptr, 0, t, sum),
                                  pg.all_to_all(nullptr, nullptr, 0, t),
                                  pg.all_to_allv(nullptr, zeros, nullptr, zeros, t),
                                  pg.isend(nullptr, 0, t, (rank + 1) % 3),
                                  pg.irecv(nullptr, 0, t, (rank + 2) % 3)};
    for (WorkPtr& w : works) {
      w->wait(Deadline::after(seconds(20)));
      EXPECT_TRUE(w->is_success()) << w->op();
    }
    int32_t v = 1;
    pg.all_reduce(&v, 1, DType::kI32)->wait();  // the ranks are still in step
    EXPECT_EQ(v, 3);
  });
}

TEST(AsyncTest, DestroyingAGroupLetsQueuedOperationsFinish) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run_collect([&](int rank, ProcessGroup&) {
    constexpr size_t kCount = 200000;
    std::vector<std::vector<int32_t>> data(5, std::vector<int32_t>(kCount, rank));
    std::vector<WorkPtr> works;
    for (auto& d : data)
      works.push_back(world.shared(rank)->all_reduce(d.data(), kCount, DType::kI32));
    world.shared(rank).reset();  // the last reference: the group is destroyed here
    for (size_t k = 0; k < works.size(); ++k) {
      EXPECT_TRUE(works[k]->is_completed()) << "rank " << rank << " op " << k;
      EXPECT_TRUE(works[k]->is_success())
          << "rank " << rank << " op " << k << ": " << describe(works[k]->exception());
      EXPECT_EQ(data[k][kCount - 1], 0 + 1 + 2) << "rank " << rank << " op " << k;
    }
  });
}

TEST(AsyncTest, WaitsAtOnceRunsTheCollectiveInsideTheCall) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    EXPECT_FALSE(WaitsAtOnce::active());
    {
      const WaitsAtOnce at_once;
      EXPECT_TRUE(WaitsAtOnce::active());
      // Nothing queued: the call returns with the collective finished.
      std::vector<int32_t> v(1000, rank + 1);
      WorkPtr w = pg.all_reduce(v.data(), v.size(), DType::kI32);
      EXPECT_TRUE(w->is_success()) << "not finished inside the call";
      EXPECT_EQ(v.back(), 3);
      // Another of the same kind: the same finished Work (no Work is made per call), whose
      // callbacks run at once; another kind has its own, named after it.
      WorkPtr again = pg.all_reduce(v.data(), v.size(), DType::kI32);
      EXPECT_EQ(again.get(), w.get());
      EXPECT_EQ(v.back(), 6);
      bool ran = false;
      again->add_callback([&] { ran = true; });
      EXPECT_TRUE(ran);
      EXPECT_EQ(pg.barrier()->op(), "barrier");
      {
        const WaitsAtOnce off(false);
        EXPECT_FALSE(WaitsAtOnce::active());
      }
      EXPECT_TRUE(WaitsAtOnce::active());
    }
    EXPECT_FALSE(WaitsAtOnce::active());
    // An asynchronous collective still queued: the next one, in a scope, queues behind it
    // and both finish in order.
    std::vector<int64_t> a(200000, rank);
    WorkPtr first = pg.all_reduce(a.data(), a.size(), DType::kI64);
    int32_t b = rank + 10;
    WorkPtr second;
    {
      const WaitsAtOnce at_once;
      second = pg.all_reduce(&b, 1, DType::kI32, ReduceOpKind::kMax);
    }
    second->wait();
    first->wait();
    EXPECT_EQ(a.front(), 1);
    EXPECT_EQ(b, 11);
  });
  // A collective that fails inside the call: wait rethrows the error, and the queue is
  // released (later calls fail the same way; none hangs).
  ThreadWorld alone(1);
  ASSERT_TRUE(alone.ok());
  alone.run([](int /*rank*/, ProcessGroup& pg) {
    pg.abort();
    const WaitsAtOnce at_once;
    int32_t c = 0;
    WorkPtr failed = pg.all_reduce(&c, 1, DType::kI32);
    EXPECT_NE(failed->exception(), nullptr);
    EXPECT_THROW(failed->wait(), PeerError);
    EXPECT_THROW(pg.barrier()->wait(), PeerError);
  });
}

TEST(AsyncTest, WaitWithDeadlineReturnsTimeoutErrorAndLeavesTheOpRunning) {
  ThreadWorld world(2, seconds(30));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    int32_t v = rank + 1;
    if (rank == 0) {
      WorkPtr w = pg.all_reduce(&v, 1, DType::kI32);
      // Rank 1 joins only after 300 ms: a 50 ms wait ends with TimeoutError...
      EXPECT_THROW(w->wait(Deadline::after(std::chrono::milliseconds(50))), TimeoutError);
      EXPECT_FALSE(w->is_completed());
      // ...and the operation still completes.
      w->wait(Deadline::after(seconds(20)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      pg.all_reduce(&v, 1, DType::kI32)->wait();
    }
    EXPECT_EQ(v, 3);
  });
}

}  // namespace
}  // namespace tdist::pg_test
