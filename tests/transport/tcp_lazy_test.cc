// Lazy TCP connections (transport/tcp/lazy_mesh.h, TDIST_LAZY_CONNECT): making a group
// connects nobody, only the pairs that exchange something connect, and a peer that is
// gone fails the first exchange with it at once. (The whole Comm contract over lazy
// connections is the conformance suite's tcp_lazy entry, comm_factories.h.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "support/scoped_env.h"
#include "tcp_test_util.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "transport/core/engine.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;
using test_support::ScopedEnv;

TcpCommOptions lazy_options() {
  TcpCommOptions o = test_options();
  o.lazy = true;
  return o;
}

core::Engine& engine_of(Comm& comm) { return dynamic_cast<core::Engine&>(comm); }

TEST(TcpLazyTest, TheSettingTurnsItOn) {
  ScopedEnv off("TDIST_LAZY_CONNECT", std::nullopt);
  EXPECT_FALSE(TcpCommOptions::from_settings().lazy);
  ScopedEnv on("TDIST_LAZY_CONNECT", "1");
  EXPECT_TRUE(TcpCommOptions::from_settings().lazy);
  ScopedEnv bad("TDIST_LAZY_CONNECT", "sometimes");
  EXPECT_THROW(TcpCommOptions::from_settings(), InvalidArgument);
}

// A ring exchange on 6 ranks: each rank ends connected to its two neighbours only, where a
// full mesh connects all 5 peers.
TEST(TcpLazyTest, OnlyThePairsThatTalkConnect) {
  constexpr int kWorld = 6;
  run_ranks(
      kWorld,
      [&](Comm& comm) {
        const int me = comm.rank();
        const int next = (me + 1) % kWorld;
        const int prev = (me + kWorld - 1) % kWorld;
        uint64_t out = 100 + static_cast<uint64_t>(me), in = 0;
        auto r = comm.irecv(prev, p2p_tag(1), &in, sizeof(in));
        auto s = comm.isend(next, p2p_tag(1), &out, sizeof(out));
        s->wait(op_deadline());
        r->wait(op_deadline());
        EXPECT_EQ(in, 100u + static_cast<uint64_t>(prev));
        for (int peer = 0; peer < kWorld; ++peer) {
          const bool neighbour = peer == next || peer == prev;
          EXPECT_EQ(engine_of(comm).connected(peer), neighbour) << "rank " << me << " to " << peer;
        }
        // Both neighbours exchange once more, so that no rank leaves before the other end of
        // its pairs has finished with them.
        auto r2 = comm.irecv(next, p2p_tag(2), &in, sizeof(in));
        auto s2 = comm.isend(prev, p2p_tag(2), &out, sizeof(out));
        s2->wait(op_deadline());
        r2->wait(op_deadline());
      },
      lazy_options());
}

// Rank 1 destroys its Comm before anything was exchanged: rank 0's first send to it fails
// with PeerError saying that nothing listens there any more, not at its deadline.
TEST(TcpLazyTest, APeerThatIsGoneFailsTheFirstExchangeWithIt) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_tcp_comm(store, 1, 2, lazy_options()); });
  auto c0 = connect_tcp_comm(store, 0, 2, lazy_options());
  t.join();
  c1.reset();
  uint64_t x = 7;
  const auto start = Clock::now();
  std::string what;
  try {
    c0->isend(1, p2p_tag(1), &x, sizeof(x))->wait(Deadline::after(30s));
  } catch (const PeerError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("nothing listens"), std::string::npos) << what;
  EXPECT_LT(Clock::now() - start, 20s) << what;
}

// Rank 0 posts a receive from any rank (which dials every peer) while rank 1 destroys its
// Comm, rank 1 starting a little later each round: whether rank 0's dial comes before rank
// 1 left (a connection, then its goodbye), while it leaves (answered that it left) or after
// (nothing listens), rank 1 is gone as if it said goodbye, not lost: the Comm stays
// healthy, the receive from any rank takes rank 2's message, and a receive from rank 1
// fails. (Before, a dial taken as rank 1 left read as a lost connection.)
TEST(TcpLazyTest, APeerThatLeavesAsAnAnySourceReceiveDialsItIsGoneNotLost) {
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    run_ranks(
        3,
        [&](Comm& comm) {
          uint64_t value = 0;
          if (comm.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::microseconds(400 * round));
            return;
          }
          if (comm.rank() == 2) {
            value = 42;
            uint64_t go = 0;
            comm.irecv(0, p2p_tag(2), &go, sizeof(go))->wait(op_deadline());
            comm.isend(0, p2p_tag(1), &value, sizeof(value))->wait(op_deadline());
            return;
          }
          auto any = comm.irecv_any(p2p_tag(1), &value, sizeof(value));
          const auto until = Clock::now() + 20s;
          while (!engine_of(comm).gone(1) && Clock::now() < until) {
            EXPECT_FALSE(any->test());
            std::this_thread::sleep_for(5ms);
          }
          ASSERT_TRUE(engine_of(comm).gone(1));
          EXPECT_EQ(comm.error(), nullptr);
          uint64_t go = 1;
          comm.isend(2, p2p_tag(2), &go, sizeof(go))->wait(op_deadline());
          any->wait(op_deadline());
          EXPECT_EQ(value, 42u);
          EXPECT_EQ(any->source(), 2);
          const std::string what = error_of<PeerError>(
              [&] { comm.irecv(1, p2p_tag(1), &value, sizeof(value))->wait(op_deadline()); });
          EXPECT_NE(what.find("destroyed its Comm"), std::string::npos) << what;
        },
        lazy_options());
  }
}

// How long making a group of 8 takes, with a full mesh and lazily, and a ring exchange
// after it (what an elastic reconfigure pays before its first collective). Printed, not
// asserted: speed goals live in benchmarks.
TEST(TcpLazyTest, SetupTimeReport) {
  constexpr int kWorld = 8;
  for (bool lazy : {false, true, false, true}) {
    TcpCommOptions options = test_options();
    options.lazy = lazy;
    std::vector<double> setup_ms(kWorld), ring_ms(kWorld);
    run_comm_ranks(
        kWorld,
        [&](std::shared_ptr<Store> store, int r, int w) {
          const auto start = Clock::now();
          auto comm = connect_tcp_comm(std::move(store), r, w, options);
          setup_ms[r] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          return comm;
        },
        [&](Comm& comm) {
          const int me = comm.rank();
          const auto start = Clock::now();
          uint64_t out = 1, in = 0;
          auto r = comm.irecv((me + kWorld - 1) % kWorld, p2p_tag(1), &in, sizeof(in));
          comm.isend((me + 1) % kWorld, p2p_tag(1), &out, sizeof(out))->wait(op_deadline());
          r->wait(op_deadline());
          ring_ms[me] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          auto r2 = comm.irecv((me + 1) % kWorld, p2p_tag(2), &in, sizeof(in));
          comm.isend((me + kWorld - 1) % kWorld, p2p_tag(2), &out, sizeof(out))
              ->wait(op_deadline());
          r2->wait(op_deadline());
        });
    double setup = 0, ring = 0;
    for (int r = 0; r < kWorld; ++r) {
      setup = std::max(setup, setup_ms[r]);
      ring = std::max(ring, ring_ms[r]);
    }
    std::printf("tcp world %d, %s: setup %.1f ms, then the first ring exchange %.1f ms\n", kWorld,
                lazy ? "lazy" : "full mesh", setup, ring);
  }
}

}  // namespace
}  // namespace tdist::transport::testing
