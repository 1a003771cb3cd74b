// Shared-memory transport, ranks as threads in one process: every size between every pair
// (wrapping and streaming through a small ring), tag matching (unexpected messages larger
// than the ring, reverse order, FIFO per tag), ring-order stress, waiting on large sends
// before their receives exist, concurrent threads, length mismatches, deadlines,
// cancellation, test() polling, and the host key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>

#include "shm_test_util.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

// 0, 1, odd, 1 MiB, and 3 rings + 5 (wraps and streams through the ring several times).
constexpr std::array<size_t, 5> kSizes = {0, 1, 17, size_t{1} << 20, 3 * kSmallRing + 5};

class ShmCommWorldTest : public ::testing::TestWithParam<int> {};

// Every rank sends every size to every other rank at once; half the receives are posted
// before the sends, half after (those arrive unexpected, some larger than the ring).
TEST_P(ShmCommWorldTest, AllPairsExchangeEverySize) {
  const int world = GetParam();
  run_shm_ranks(world, [&](Comm& comm) {
    ASSERT_EQ(comm.size(), world);
    const int me = comm.rank();
    auto seed = [&](int from, int to, size_t s) { return uint64_t(from * 100 + to) * 31 + s; };
    std::vector<std::vector<uint8_t>> out;
    std::vector<std::vector<uint8_t>> in;
    std::vector<std::pair<int, size_t>> slots;  // (peer, size index) of in[]
    std::vector<RequestPtr> reqs;
    auto post_receives = [&](bool early) {
      for (int p = 0; p < world; ++p) {
        for (size_t s = 0; s < kSizes.size(); ++s) {
          if (p == me || (s % 2 == 0) != early) continue;
          in.emplace_back(kSizes[s], 0xEE);
          slots.emplace_back(p, s);
          reqs.push_back(comm.irecv(p, collective_tag(s, 1), in.back().data(), kSizes[s]));
        }
      }
    };
    in.reserve(world * kSizes.size());
    post_receives(true);
    for (int p = 0; p < world; ++p) {
      for (size_t s = 0; s < kSizes.size() && p != me; ++s) {
        out.push_back(pattern(seed(me, p, s), kSizes[s]));
        reqs.push_back(comm.isend(p, collective_tag(s, 1), out.back().data(), kSizes[s]));
      }
    }
    post_receives(false);
    for (auto& r : reqs) r->wait(Deadline::after(30s));
    for (size_t i = 0; i < in.size(); ++i) {
      auto [p, s] = slots[i];
      ASSERT_EQ(in[i], pattern(seed(p, me, s), kSizes[s])) << "from " << p << ", " << kSizes[s];
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, ShmCommWorldTest, ::testing::Range(1, 9));

TEST(ShmCommTest, TagsReceivedInReverseOrderIncludingMessagesLargerThanTheRing) {
  constexpr int kMessages = 12;
  auto size_of = [](int m) { return m % 3 == 0 ? 2 * kSmallRing + m : static_cast<size_t>(m); };
  run_shm_ranks(2, [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::vector<std::vector<uint8_t>> data;
      std::vector<RequestPtr> reqs;
      for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m, size_of(m)));
      for (int m = 0; m < kMessages; ++m) {
        reqs.push_back(comm.isend(1, p2p_tag(m), data[m].data(), data[m].size()));
      }
      for (auto& r : reqs) r->wait(Deadline::after(20s));
    } else {
      std::this_thread::sleep_for(50ms);
      for (int m = kMessages - 1; m >= 0; --m) {
        std::vector<uint8_t> buf(size_of(m));
        comm.irecv(0, p2p_tag(m), buf.data(), buf.size())->wait(Deadline::after(20s));
        ASSERT_EQ(buf, pattern(m, size_of(m))) << "message " << m;
      }
    }
  });
}

// Thousands of small messages of varied sizes on three tags, through a 4 KiB ring: each
// tag's messages arrive in order and intact, whatever the receive interleaving.
TEST(ShmCommTest, RingOrderStressWithManySmallMessages) {
  constexpr int kMessages = 6000;
  auto size_of = [](int m) { return static_cast<size_t>((m * 37) % 203); };
  run_shm_ranks(
      2,
      [&](Comm& comm) {
        if (comm.rank() == 0) {
          std::vector<std::vector<uint8_t>> data;
          for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m, size_of(m)));
          std::vector<RequestPtr> reqs;
          for (int m = 0; m < kMessages; ++m) {
            reqs.push_back(comm.isend(1, p2p_tag(m % 3), data[m].data(), data[m].size()));
          }
          for (auto& r : reqs) r->wait(Deadline::after(20s));
        } else {
          std::mt19937 rng(5);
          int next[3] = {0, 1, 2};  // next message number expected on each tag
          std::vector<uint8_t> buf;
          while (next[0] < kMessages || next[1] < kMessages || next[2] < kMessages) {
            const int tag = static_cast<int>(rng() % 3);
            if (next[tag] >= kMessages) continue;
            const int m = next[tag];
            buf.assign(size_of(m), 0);
            comm.irecv(0, p2p_tag(tag), buf.data(), buf.size())->wait(Deadline::after(20s));
            ASSERT_EQ(buf, pattern(m, size_of(m))) << "message " << m;
            next[tag] += 3;
          }
        }
      },
      shm_options(4096));
}

// Each rank waits on a send several rings long before posting its receive: the waiting
// driver also drains incoming rings (into the heap), so this cannot deadlock.
TEST(ShmCommTest, LargeSendsWaitedOnBeforeTheirReceivesArePostedDoNotDeadlock) {
  constexpr size_t kBytes = 5 * kSmallRing + 11;
  for (int world : {2, 3}) {
    run_shm_ranks(world, [&](Comm& comm) {
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

// Two threads of each rank use one Comm at once: one drives, the other sleeps and takes
// over when the driver leaves.
TEST(ShmCommTest, ConcurrentThreadsOnOneComm) {
  constexpr int kRounds = 300;
  run_shm_ranks(2, [&](Comm& comm) {
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

TEST(ShmCommTest, LengthMismatchIsDesyncErrorAndTheCommStaysUsable) {
  run_shm_ranks(2, [&](Comm& comm) {
    const auto big = pattern(5, 3 * kSmallRing);
    const auto small = pattern(6, 8);
    if (comm.rank() == 0) {
      for (uint32_t tag = 1; tag <= 3; tag += 2) {
        comm.isend(1, p2p_tag(tag), big.data(), big.size())->wait(Deadline::after(20s));
        comm.isend(1, p2p_tag(tag + 1), small.data(), small.size())->wait(Deadline::after(20s));
      }
    } else {
      // Posted before the message arrives: the payload is skipped in the ring.
      std::vector<uint8_t> buf(50);
      std::string what = error_of<DesyncError>(
          [&] { comm.irecv(0, p2p_tag(1), buf.data(), 50)->wait(Deadline::after(20s)); });
      EXPECT_NE(what.find(std::to_string(big.size()) + " bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("expects 50"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      std::vector<uint8_t> got(8);
      comm.irecv(0, p2p_tag(2), got.data(), 8)->wait(Deadline::after(20s));
      EXPECT_EQ(got, small);
      // Posted after it arrived (unexpected, complete or still streaming).
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

TEST(ShmCommTest, DeadlineIsTimeoutErrorWithoutAbort) {
  run_shm_ranks(2, [&](Comm& comm) {
    uint64_t value = 0;
    if (comm.rank() == 1) {
      auto req = comm.irecv(0, p2p_tag(9), &value, sizeof(value));
      const auto start = Clock::now();
      std::string what = error_of<TimeoutError>([&] { req->wait(Deadline::after(100ms)); });
      EXPECT_GE(Clock::now() - start, 100ms);
      EXPECT_NE(what.find("receive from rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("still pending"), std::string::npos) << what;
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

// A send larger than the ring completes by test() alone (test drives progress once).
TEST(ShmCommTest, TestAloneDrivesProgress) {
  constexpr size_t kBytes = 4 * kSmallRing + 3;
  run_shm_ranks(2, [&](Comm& comm) {
    const auto out = pattern(11, kBytes);
    std::vector<uint8_t> in(kBytes);
    RequestPtr req = comm.rank() == 0 ? comm.isend(1, 1, out.data(), kBytes)
                                      : comm.irecv(0, 1, in.data(), kBytes);
    const auto give_up = Clock::now() + 20s;
    while (!req->test()) {
      ASSERT_LT(Clock::now(), give_up);
      std::this_thread::sleep_for(100us);
    }
    if (comm.rank() == 1) {
      EXPECT_EQ(in, out);
    }
  });
}

TEST(ShmCommTest, DroppedRequestsAreWithdrawnOrFinished) {
  constexpr size_t kBig = 3 * kSmallRing;
  run_shm_ranks(2, [&](Comm& comm) {
    uint64_t a = 0;
    if (comm.rank() == 1) {
      { auto dropped = comm.irecv(0, p2p_tag(1), &a, sizeof(a)); }  // withdrawn unfinished
      uint64_t go = 1;
      comm.isend(0, p2p_tag(2), &go, sizeof(go))->wait(Deadline::after(20s));
      uint64_t b = 0;
      comm.irecv(0, p2p_tag(1), &b, sizeof(b))->wait(Deadline::after(20s));
      EXPECT_EQ(b, 7u);
      EXPECT_EQ(a, 0u);
      std::vector<uint8_t> big(kBig);
      comm.irecv(0, p2p_tag(3), big.data(), kBig)->wait(Deadline::after(20s));
      EXPECT_EQ(big, pattern(3, kBig));
    } else {
      uint64_t go = 0;
      comm.irecv(1, p2p_tag(2), &go, sizeof(go))->wait(Deadline::after(20s));
      a = 7;
      comm.isend(1, p2p_tag(1), &a, sizeof(a))->wait(Deadline::after(20s));
      // Dropped part-way: the rest goes from a private copy, so the buffer may change.
      auto out = pattern(3, kBig);
      { auto dropped = comm.isend(1, p2p_tag(3), out.data(), kBig); }
      std::fill(out.begin(), out.end(), 0);
    }
  });
}

TEST(ShmCommTest, BadArgumentsAreInvalidArgument) {
  run_shm_ranks(2, [&](Comm& comm) {
    uint64_t x = 0;
    EXPECT_THROW(comm.isend(comm.rank(), 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(5, 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(1 - comm.rank(), 1, nullptr, 8), InvalidArgument);
  });
  EXPECT_THROW(connect_shm_comm(std::make_shared<HashStore>(), 2, 2, shm_options()),
               InvalidArgument);
}

TEST(ShmCommTest, HostKeyIsStableAndNamesBootIdAndHost) {
  const std::string key = shm_host_key();
  EXPECT_EQ(key, shm_host_key());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  EXPECT_NE(key.find(host), std::string::npos) << key;
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  EXPECT_EQ(key.rfind(boot_id, 0), 0u) << key;
}

}  // namespace
}  // namespace tdist::transport::testing
