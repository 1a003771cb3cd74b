// TCP transport with several sockets per peer (TDIST_SOCKET_NSOCKS_PERPEER = 1, 2, 4),
// ranks as threads: equal tags stay in posting order across many messages and sizes
// (messages alternate between the sockets), mixed tags received in another order, large
// messages both ways at once, desync, and failures (abort, destroyed peer, a mismatched
// socket count) still detected.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/sanitizers.h"
#include "tcp_test_util.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

TcpCommOptions options_with(int nsocks) {
  TcpCommOptions o = test_options();
  o.nsocks_per_peer = nsocks;
  return o;
}

// Sizes that mix empty, small, staging-sized and multi-megabyte messages.
size_t size_of(int m) {
  switch (m % 7) {
    case 0:
      return 0;
    case 1:
      return 8;
    case 2:
      return 4097;
    case 3:
      return 64 * 1024 + 3;
    case 4:
      return (size_t{1} << 20) + 17;
    case 5:
      return 1;
    default:
      return 300 * 1024 + (m % 13);
  }
}

class TcpCommNsocksTest : public ::testing::TestWithParam<int> {};

// Many messages on one tag, half sent before their receives exist (unexpected queue),
// half after: every receive gets the message of its position.
TEST_P(TcpCommNsocksTest, EqualTagsKeepPostingOrder) {
  // TSan makes writing and comparing the ~50 MB each rank sends 20 times slower: there 12
  // rounds of the 7 sizes instead of 34.
  constexpr int kMessages = test_support::kThreadSanitizer ? 84 : 240;
  for (int world : {2, 3}) {
    run_ranks(
        world,
        [&](Comm& comm) {
          const int me = comm.rank();
          const int next = (me + 1) % world;
          const int prev = (me + world - 1) % world;
          std::vector<std::vector<uint8_t>> out;
          for (int m = 0; m < kMessages; ++m) out.push_back(pattern(me * 100000 + m, size_of(m)));
          std::vector<std::vector<uint8_t>> in;
          for (int m = 0; m < kMessages; ++m) in.emplace_back(size_of(m), 0xEE);
          std::vector<RequestPtr> sends;
          std::vector<RequestPtr> recvs;
          for (int m = 0; m < kMessages / 2; ++m) {
            sends.push_back(comm.isend(next, p2p_tag(9), out[m].data(), out[m].size()));
          }
          std::this_thread::sleep_for(50ms);  // the first half arrives unexpected
          for (int m = 0; m < kMessages; ++m) {
            recvs.push_back(comm.irecv(prev, p2p_tag(9), in[m].data(), in[m].size()));
          }
          for (int m = kMessages / 2; m < kMessages; ++m) {
            sends.push_back(comm.isend(next, p2p_tag(9), out[m].data(), out[m].size()));
          }
          for (auto& r : recvs) r->wait(Deadline::after(30s));
          for (auto& r : sends) r->wait(Deadline::after(30s));
          for (int m = 0; m < kMessages; ++m) {
            ASSERT_EQ(in[m], pattern(prev * 100000 + m, size_of(m))) << "message " << m;
          }
        },
        options_with(GetParam()));
  }
}

// Three tags interleaved on the sender; the receiver posts all of tag C, then B, then A,
// each in order; some receives are posted while the messages are still arriving.
TEST_P(TcpCommNsocksTest, MixedTagsMatchPerTagInOrder) {
  constexpr int kMessages = 150;
  run_ranks(
      2,
      [&](Comm& comm) {
        auto tag_of = [](int m) { return collective_tag(5, static_cast<uint32_t>(m % 3)); };
        if (comm.rank() == 0) {
          std::vector<std::vector<uint8_t>> data;
          for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m + 5, size_of(m)));
          std::vector<RequestPtr> reqs;
          for (int m = 0; m < kMessages; ++m) {
            reqs.push_back(comm.isend(1, tag_of(m), data[m].data(), data[m].size()));
          }
          for (auto& r : reqs) r->wait(Deadline::after(30s));
        } else {
          std::vector<std::vector<uint8_t>> bufs;
          for (int m = 0; m < kMessages; ++m) bufs.emplace_back(size_of(m), 0xEE);
          std::vector<RequestPtr> reqs;
          for (int t : {2, 1, 0}) {
            for (int m = t; m < kMessages; m += 3) {
              reqs.push_back(comm.irecv(0, tag_of(m), bufs[m].data(), bufs[m].size()));
            }
            if (t == 2) std::this_thread::sleep_for(20ms);
          }
          for (auto& r : reqs) r->wait(Deadline::after(30s));
          for (int m = 0; m < kMessages; ++m) ASSERT_EQ(bufs[m], pattern(m + 5, size_of(m))) << m;
        }
      },
      options_with(GetParam()));
}

// Pipelined large chunks on one tag in both directions at once (the two-rank exchange of
// all_reduce), waited on by the posting thread.
TEST_P(TcpCommNsocksTest, LargeChunksBothWaysAtOnce) {
  constexpr int kChunks = 8;
  constexpr size_t kChunk = (size_t{4} << 20) + 7;
  run_ranks(
      2,
      [&](Comm& comm) {
        const int me = comm.rank();
        const int peer = 1 - me;
        std::vector<std::vector<uint8_t>> out;
        std::vector<std::vector<uint8_t>> in(kChunks, std::vector<uint8_t>(kChunk));
        for (int c = 0; c < kChunks; ++c) out.push_back(pattern(me * 1000 + c, kChunk));
        std::vector<RequestPtr> reqs;
        for (int c = 0; c < kChunks; ++c) {
          reqs.push_back(comm.irecv(peer, collective_tag(1, 0), in[c].data(), kChunk));
          reqs.push_back(comm.isend(peer, collective_tag(1, 0), out[c].data(), kChunk));
        }
        for (auto& r : reqs) r->wait(Deadline::after(60s));
        for (int c = 0; c < kChunks; ++c) ASSERT_EQ(in[c], pattern(peer * 1000 + c, kChunk)) << c;
      },
      options_with(GetParam()));
}

TEST_P(TcpCommNsocksTest, LengthMismatchKeepsEveryStreamUsable) {
  run_ranks(
      2,
      [&](Comm& comm) {
        std::vector<uint8_t> a = pattern(1, 100000);
        std::vector<uint8_t> b = pattern(2, 5000);
        std::vector<uint8_t> c = pattern(3, 70000);
        if (comm.rank() == 0) {
          for (auto* v : {&a, &b, &c})
            comm.isend(1, 7, v->data(), v->size())->wait(Deadline::after(10s));
        } else {
          std::vector<uint8_t> wrong(10);
          EXPECT_THROW(comm.irecv(0, 7, wrong.data(), wrong.size())->wait(Deadline::after(10s)),
                       DesyncError);
          std::vector<uint8_t> gb(5000);
          std::vector<uint8_t> gc(70000);
          comm.irecv(0, 7, gb.data(), gb.size())->wait(Deadline::after(10s));
          comm.irecv(0, 7, gc.data(), gc.size())->wait(Deadline::after(10s));
          EXPECT_EQ(gb, b);
          EXPECT_EQ(gc, c);
        }
      },
      options_with(GetParam()));
}

TEST_P(TcpCommNsocksTest, AbortReachesThePeerWhileTrafficFlows) {
  run_ranks(
      2,
      [&](Comm& comm) {
        if (comm.rank() == 1) {
          std::vector<uint8_t> big = pattern(4, size_t{8} << 20);
          comm.isend(0, 1, big.data(), big.size())->wait(Deadline::after(10s));
          std::this_thread::sleep_for(100ms);
          comm.abort(std::make_exception_ptr(PeerError("rank 1: gave up")));
          return;
        }
        std::vector<uint8_t> got(size_t{8} << 20);
        comm.irecv(1, 1, got.data(), got.size())->wait(Deadline::after(10s));
        uint64_t x = 0;
        auto start = Clock::now();
        std::string what =
            error_of<PeerError>([&] { comm.irecv(1, 2, &x, 8)->wait(Deadline::after(10s)); });
        EXPECT_NE(what.find("gave up"), std::string::npos) << what;
        EXPECT_LT(Clock::now() - start, 5s);
      },
      options_with(GetParam()));
}

TEST_P(TcpCommNsocksTest, DestroyedPeerIsDetected) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_tcp_comm(store, 1, 2, options_with(GetParam())); });
  auto c0 = connect_tcp_comm(store, 0, 2, options_with(GetParam()));
  t.join();
  // Some traffic first, so the sockets are at different points of the send order.
  for (int m = 0; m < 5; ++m) {
    uint64_t v = static_cast<uint64_t>(m);
    uint64_t got = 99;
    auto r = c0->irecv(1, 3, &got, 8);
    c1->isend(0, 3, &v, 8)->wait(Deadline::after(5s));
    r->wait(Deadline::after(5s));
    EXPECT_EQ(got, v);
  }
  uint64_t x = 0;
  auto req = c0->irecv(1, 4, &x, 8);
  c1.reset();
  std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(5s)); });
  EXPECT_NE(what.find("destroyed its Comm"), std::string::npos) << what;
}

INSTANTIATE_TEST_SUITE_P(Nsocks, TcpCommNsocksTest, ::testing::Values(1, 2, 4));

TEST(TcpCommNsocksSetupTest, RanksDisagreeingOnTheSocketCountNeverConnect) {
  auto store = std::make_shared<HashStore>();
  TcpCommOptions o0 = options_with(2);
  TcpCommOptions o1 = options_with(1);
  o0.timeout = o1.timeout = 500ms;
  std::string what0;
  std::thread t0(
      [&] { what0 = error_of<TimeoutError>([&] { connect_tcp_comm(store, 0, 2, o0); }); });
  std::string what1 = error_of<TimeoutError>([&] { connect_tcp_comm(store, 1, 2, o1); });
  t0.join();
  EXPECT_NE(what0.find("rank 1"), std::string::npos) << what0;
  EXPECT_NE(what1.find("rank 0"), std::string::npos) << what1;
}

}  // namespace
}  // namespace tdist::transport::testing
