// TCP transport, ranks as threads in one process: delivery of every size between every
// pair, tag matching (unexpected messages, reverse order, FIFO per tag), many outstanding
// sends, length mismatches, deadlines, cancellation, and interface selection.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "tcp_test_util.h"
#include "tdist/error.h"
#include "transport/tcp/interface.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kPingPongSizes[] = {0, 1, 4097, (size_t{8} << 20) + 3};

class TcpCommWorldTest : public ::testing::TestWithParam<int> {};

// Every pair (i < j), in the same order on every rank: i sends, j echoes it back.
TEST_P(TcpCommWorldTest, PingPongEverySizeBetweenEveryPair) {
  const int world = GetParam();
  run_ranks(world, [&](Comm& comm) {
    ASSERT_EQ(comm.size(), world);
    const int me = comm.rank();
    for (int i = 0; i < world; ++i) {
      for (int j = i + 1; j < world; ++j) {
        if (me != i && me != j) continue;
        for (size_t bytes : kPingPongSizes) {
          const uint64_t tag = collective_tag(static_cast<uint64_t>(i * world + j), 7);
          const auto expected = pattern(static_cast<uint64_t>(i * 1000 + j) ^ bytes, bytes);
          std::vector<uint8_t> buf(bytes, 0xEE);
          if (me == i) {
            comm.isend(j, tag, expected.data(), bytes)->wait(Deadline::after(20s));
            comm.irecv(j, tag, buf.data(), bytes)->wait(Deadline::after(20s));
          } else {
            comm.irecv(i, tag, buf.data(), bytes)->wait(Deadline::after(20s));
            comm.isend(i, tag, buf.data(), bytes)->wait(Deadline::after(20s));
          }
          ASSERT_EQ(buf, expected) << "pair " << i << "-" << j << ", " << bytes << " bytes";
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, TcpCommWorldTest, ::testing::Range(1, 9));

TEST(TcpCommTest, TagsReceivedInReverseOrder) {
  constexpr int kMessages = 12;
  auto size_of = [](int m) { return m % 3 == 0 ? (size_t{1} << 20) + m : static_cast<size_t>(m); };
  run_ranks(2, [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::vector<std::vector<uint8_t>> data;
      std::vector<RequestPtr> reqs;
      for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m, size_of(m)));
      for (int m = 0; m < kMessages; ++m) {
        reqs.push_back(comm.isend(1, p2p_tag(m), data[m].data(), data[m].size()));
      }
      for (auto& r : reqs) r->wait(Deadline::after(20s));
    } else {
      std::this_thread::sleep_for(50ms);  // let most of them arrive unexpected
      for (int m = kMessages - 1; m >= 0; --m) {
        std::vector<uint8_t> buf(size_of(m));
        comm.irecv(0, p2p_tag(m), buf.data(), buf.size())->wait(Deadline::after(20s));
        ASSERT_EQ(buf, pattern(m, size_of(m))) << "message " << m;
      }
    }
  });
}

TEST(TcpCommTest, ManyOutstandingSendsBeforeTheReceivesArePosted) {
  constexpr int kMessages = 300;
  constexpr size_t kBytes = 64 * 1024 + 5;  // ~20 MiB in all: more than the socket buffers
  run_ranks(2, [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::vector<std::vector<uint8_t>> data;
      for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m + 77, kBytes));
      std::vector<RequestPtr> reqs;
      // Half on one tag (FIFO order matters), half on their own tags.
      for (int m = 0; m < kMessages; ++m) {
        uint64_t tag = m % 2 == 0 ? p2p_tag(1) : p2p_tag(1000 + m);
        reqs.push_back(comm.isend(1, tag, data[m].data(), kBytes));
      }
      for (auto& r : reqs) r->wait(Deadline::after(30s));
    } else {
      std::this_thread::sleep_for(100ms);
      std::vector<std::vector<uint8_t>> bufs(kMessages, std::vector<uint8_t>(kBytes));
      std::vector<RequestPtr> reqs;
      for (int m = kMessages - 1; m >= 0; --m) {  // odd tags in reverse, even tag in order
        if (m % 2 == 1) reqs.push_back(comm.irecv(0, p2p_tag(1000 + m), bufs[m].data(), kBytes));
      }
      for (int m = 0; m < kMessages; m += 2) {
        reqs.push_back(comm.irecv(0, p2p_tag(1), bufs[m].data(), kBytes));
      }
      for (auto& r : reqs) r->wait(Deadline::after(30s));
      for (int m = 0; m < kMessages; ++m) ASSERT_EQ(bufs[m], pattern(m + 77, kBytes)) << m;
    }
  });
}

// Every rank waits on a large send to its successor before it posts the receive from its
// predecessor: only background reading (the I/O thread) keeps this from deadlocking.
TEST(TcpCommTest, LargeSendsWaitedOnBeforeTheirReceivesArePostedDoNotDeadlock) {
  constexpr size_t kBytes = (size_t{24} << 20) + 11;
  for (int world : {2, 3}) {
    run_ranks(world, [&](Comm& comm) {
      const int me = comm.rank();
      const int next = (me + 1) % world;
      const int prev = (me + world - 1) % world;
      const auto out = pattern(me, kBytes);
      comm.isend(next, 3, out.data(), kBytes)->wait(Deadline::after(30s));
      std::vector<uint8_t> in(kBytes);
      comm.irecv(prev, 3, in.data(), kBytes)->wait(Deadline::after(30s));
      ASSERT_EQ(in, pattern(prev, kBytes));
    });
  }
}

// Two threads of each rank use one Comm at once, on the same peer and different tags.
TEST(TcpCommTest, ConcurrentThreadsOnOneComm) {
  constexpr int kRounds = 300;
  run_ranks(2, [&](Comm& comm) {
    const int peer = 1 - comm.rank();
    auto worker = [&](uint32_t lane) {
      for (int i = 0; i < kRounds; ++i) {
        const size_t bytes = static_cast<size_t>(i % 7 == 0 ? 200000 : i * 13);
        const auto out = pattern(lane * 100000 + i + comm.rank(), bytes);
        std::vector<uint8_t> in(bytes);
        auto r = comm.irecv(peer, p2p_tag(lane), in.data(), bytes);
        auto s = comm.isend(peer, p2p_tag(lane), out.data(), bytes);
        s->wait(Deadline::after(30s));
        r->wait(Deadline::after(30s));
        ASSERT_EQ(in, pattern(lane * 100000 + i + peer, bytes));
      }
    };
    std::thread other([&] { worker(1); });
    worker(2);
    other.join();
  });
}

TEST(TcpCommTest, LengthMismatchIsDesyncErrorAndTheStreamStaysUsable) {
  run_ranks(2, [&](Comm& comm) {
    const auto big = pattern(5, 100000);
    const auto small = pattern(6, 8);
    if (comm.rank() == 0) {
      comm.isend(1, p2p_tag(1), big.data(), big.size())->wait(Deadline::after(20s));
      comm.isend(1, p2p_tag(2), small.data(), small.size())->wait(Deadline::after(20s));
      comm.isend(1, p2p_tag(3), big.data(), big.size())->wait(Deadline::after(20s));
      comm.isend(1, p2p_tag(4), small.data(), small.size())->wait(Deadline::after(20s));
    } else {
      // Posted before the message arrives.
      std::vector<uint8_t> buf(50);
      std::string what = error_of<DesyncError>(
          [&] { comm.irecv(0, p2p_tag(1), buf.data(), 50)->wait(Deadline::after(20s)); });
      EXPECT_NE(what.find("100000 bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("expects 50"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      std::vector<uint8_t> got(8);
      comm.irecv(0, p2p_tag(2), got.data(), 8)->wait(Deadline::after(20s));
      EXPECT_EQ(got, small);
      // Posted after the message arrived (from the unexpected queue).
      std::this_thread::sleep_for(50ms);
      std::vector<uint8_t> bigger(200000);
      what = error_of<DesyncError>([&] {
        comm.irecv(0, p2p_tag(3), bigger.data(), bigger.size())->wait(Deadline::after(20s));
      });
      EXPECT_NE(what.find("expects 200000"), std::string::npos) << what;
      comm.irecv(0, p2p_tag(4), got.data(), 8)->wait(Deadline::after(20s));
      EXPECT_EQ(got, small);
      EXPECT_EQ(comm.error(), nullptr);
    }
  });
}

TEST(TcpCommTest, DeadlineIsTimeoutErrorWithoutAbort) {
  run_ranks(2, [&](Comm& comm) {
    uint64_t value = 0;
    if (comm.rank() == 1) {
      auto req = comm.irecv(0, p2p_tag(9), &value, sizeof(value));
      const auto start = Clock::now();
      std::string what = error_of<TimeoutError>([&] { req->wait(Deadline::after(100ms)); });
      EXPECT_GE(Clock::now() - start, 100ms);
      EXPECT_NE(what.find("receive from rank 0"), std::string::npos) << what;
      EXPECT_EQ(comm.error(), nullptr);
      EXPECT_FALSE(req->test());
      uint64_t go = 1;
      comm.isend(0, p2p_tag(8), &go, sizeof(go))->wait(Deadline::after(20s));
      req->wait(Deadline::after(20s));  // the same request completes later
      EXPECT_EQ(value, 42u);
    } else {
      uint64_t go = 0;
      comm.irecv(1, p2p_tag(8), &go, sizeof(go))->wait(Deadline::after(20s));
      value = 42;
      comm.isend(1, p2p_tag(9), &value, sizeof(value))->wait(Deadline::after(20s));
    }
  });
}

TEST(TcpCommTest, DroppedReceiveIsWithdrawn) {
  run_ranks(2, [&](Comm& comm) {
    uint64_t a = 0;
    if (comm.rank() == 1) {
      { auto dropped = comm.irecv(0, p2p_tag(1), &a, sizeof(a)); }  // withdrawn unfinished
      uint64_t go = 1;
      comm.isend(0, p2p_tag(2), &go, sizeof(go))->wait(Deadline::after(20s));
      uint64_t b = 0;
      comm.irecv(0, p2p_tag(1), &b, sizeof(b))->wait(Deadline::after(20s));
      EXPECT_EQ(b, 7u);
      EXPECT_EQ(a, 0u);
    } else {
      uint64_t go = 0;
      comm.irecv(1, p2p_tag(2), &go, sizeof(go))->wait(Deadline::after(20s));
      a = 7;
      comm.isend(1, p2p_tag(1), &a, sizeof(a))->wait(Deadline::after(20s));
    }
  });
}

TEST(TcpCommTest, BadArgumentsAreInvalidArgument) {
  run_ranks(2, [&](Comm& comm) {
    uint64_t x = 0;
    EXPECT_THROW(comm.isend(comm.rank(), 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(5, 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.isend(1 - comm.rank(), ~uint64_t{0}, &x, 8), InvalidArgument);
  });
  EXPECT_THROW(connect_tcp_comm(std::make_shared<HashStore>(), 2, 2, test_options()),
               InvalidArgument);
}

TEST(TcpCommInterfaceTest, IfnameSyntax) {
  using tcp::interface_matches;
  EXPECT_TRUE(interface_matches("", "eth0"));
  EXPECT_TRUE(interface_matches("eth", "eth0"));
  EXPECT_TRUE(interface_matches("ib,eth", "eth1"));
  EXPECT_FALSE(interface_matches("ib,eth", "lo"));
  EXPECT_FALSE(interface_matches("^lo,docker", "lo"));
  EXPECT_FALSE(interface_matches("^lo,docker", "docker0"));
  EXPECT_TRUE(interface_matches("^lo,docker", "eth0"));
  EXPECT_TRUE(interface_matches("=eth0", "eth0"));
  EXPECT_FALSE(interface_matches("=eth0", "eth01"));
  EXPECT_FALSE(interface_matches("^=eth0", "eth0"));
  EXPECT_TRUE(interface_matches("^=eth0", "eth01"));
}

TEST(TcpCommInterfaceTest, UnknownInterfaceIsAnErrorNamingIt) {
  ::setenv("TDIST_SOCKET_IFNAME", "nonexistent0", 1);
  TcpCommOptions options = test_options();
  ::unsetenv("TDIST_SOCKET_IFNAME");
  EXPECT_EQ(options.ifname, "nonexistent0");
  std::string what =
      error_of<Error>([&] { connect_tcp_comm(std::make_shared<HashStore>(), 0, 2, options); });
  EXPECT_NE(what.find("TDIST_SOCKET_IFNAME='nonexistent0'"), std::string::npos) << what;
  EXPECT_NE(what.find("lo"), std::string::npos) << what;  // the list of interfaces
}

TEST(TcpCommInterfaceTest, LoopbackByName) {
  ::setenv("TDIST_SOCKET_IFNAME", "=lo", 1);
  TcpCommOptions options = test_options();
  ::unsetenv("TDIST_SOCKET_IFNAME");
  run_ranks(
      3,
      [&](Comm& comm) {
        uint32_t v = static_cast<uint32_t>(comm.rank());
        uint32_t got = 99;
        int next = (comm.rank() + 1) % 3;
        int prev = (comm.rank() + 2) % 3;
        auto r = comm.irecv(prev, 5, &got, 4);
        comm.isend(next, 5, &v, 4)->wait(Deadline::after(20s));
        r->wait(Deadline::after(20s));
        EXPECT_EQ(got, static_cast<uint32_t>(prev));
      },
      options);
}

}  // namespace
}  // namespace tdist::transport::testing
