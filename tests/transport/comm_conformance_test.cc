// Comm conformance, delivery: every transport of comm_factories.h, ranks as threads.
// Every size between every pair (posted before and after arrival), matching by (source,
// tag) in posting order, thousands of small messages through a tiny ring, an unexpected
// message larger than any internal buffer, zero-byte messages, many large messages in
// flight both ways, sends waited on before their receives exist, a waiter on one peer
// not starving another, concurrent threads on one Comm, and test() alone completing.
#include "comm_conformance.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kRing = kTestRingBytes;

// 0, 1, odd, a page + 1, 3 rings + 5 (wraps and streams through a ring several times),
// 1 MiB + 3 (more than a socket buffer).
constexpr std::array<size_t, 6> kSizes = {0, 1, 17, 4097, 3 * kRing + 5, (size_t{1} << 20) + 3};

// Every rank sends every size to every other rank at once; half the receives are posted
// before the sends, half after (those arrive unexpected).
TEST_P(CommWorldTest, AllPairsExchangeEverySize) {
  const int world = this->world();
  run_factory_ranks(factory(), world, [&](Comm& comm) {
    ASSERT_EQ(comm.size(), world);
    const int me = comm.rank();
    auto seed = [&](int from, int to, size_t s) { return uint64_t(from * 100 + to) * 31 + s; };
    std::vector<std::vector<uint8_t>> out;
    std::vector<std::vector<uint8_t>> in;
    std::vector<std::pair<int, size_t>> slots;  // (peer, size index) of in[]
    std::vector<RequestPtr> reqs;
    in.reserve(world * kSizes.size());  // no reallocation: posted buffers stay put
    out.reserve(world * kSizes.size());
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
    post_receives(true);
    for (int p = 0; p < world; ++p) {
      for (size_t s = 0; s < kSizes.size() && p != me; ++s) {
        out.push_back(pattern(seed(me, p, s), kSizes[s]));
        reqs.push_back(comm.isend(p, collective_tag(s, 1), out.back().data(), kSizes[s]));
      }
    }
    post_receives(false);
    for (auto& r : reqs) r->wait(op_deadline());
    for (size_t i = 0; i < in.size(); ++i) {
      auto [p, s] = slots[i];
      ASSERT_EQ(in[i], pattern(seed(p, me, s), kSizes[s])) << "from " << p << ", " << kSizes[s];
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CommWorldTest,
                         ::testing::Combine(::testing::ValuesIn(comm_factories()),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         factory_world_case_name);

class CommDeliveryTest : public CommTest {
 protected:
  void many_messages_in_flight_both_ways(size_t bytes);
};

// Ranks 1 and 2 each send rank 0 messages on three tags; rank 0 posts its receives tag
// by tag in reverse, alternating sources, some before and most after the messages
// arrived: each receive gets the message of its position among its (source, tag).
TEST_P(CommDeliveryTest, MatchingBySourceAndTagInPostingOrder) {
  constexpr int kMessages = 45;  // per source
  auto size_of = [](int m) {
    return m % 5 == 0 ? 2 * kRing + m : m % 5 == 1 ? 0 : static_cast<size_t>(m * 7);
  };
  auto tag_of = [](int m) { return p2p_tag(static_cast<uint32_t>(m % 3)); };
  run(3, [&](Comm& comm) {
    const int me = comm.rank();
    if (me != 0) {
      std::vector<std::vector<uint8_t>> data;
      for (int m = 0; m < kMessages; ++m) data.push_back(pattern(me * 1000 + m, size_of(m)));
      std::vector<RequestPtr> reqs;
      for (int m = 0; m < kMessages; ++m) {
        reqs.push_back(comm.isend(0, tag_of(m), data[m].data(), data[m].size()));
      }
      for (auto& r : reqs) r->wait(op_deadline());
      return;
    }
    std::vector<std::vector<uint8_t>> bufs[3];
    for (int s : {1, 2}) {
      for (int m = 0; m < kMessages; ++m) bufs[s].emplace_back(size_of(m), 0xEE);
    }
    std::vector<RequestPtr> reqs;
    for (int t : {2, 1, 0}) {
      for (int m = t; m < kMessages; m += 3) {
        for (int s : {2, 1}) {
          reqs.push_back(comm.irecv(s, tag_of(m), bufs[s][m].data(), bufs[s][m].size()));
        }
      }
      if (t == 2) std::this_thread::sleep_for(50ms);  // the rest arrives unexpected
    }
    for (auto& r : reqs) r->wait(op_deadline());
    for (int s : {1, 2}) {
      for (int m = 0; m < kMessages; ++m) {
        ASSERT_EQ(bufs[s][m], pattern(s * 1000 + m, size_of(m))) << "source " << s << ", #" << m;
      }
    }
  });
}

// Thousands of small messages of varied sizes on three tags, through the smallest ring:
// each tag's messages arrive in order and intact, whatever the receive interleaving.
TEST_P(CommDeliveryTest, ManySmallMessagesKeepTheirOrderPerTag) {
  constexpr int kMessages = 6000;
  auto size_of = [](int m) { return static_cast<size_t>((m * 37) % 203); };
  CommTestOptions options;
  options.ring_bytes = 4096;
  run(
      2,
      [&](Comm& comm) {
        if (comm.rank() == 0) {
          std::vector<std::vector<uint8_t>> data;
          for (int m = 0; m < kMessages; ++m) data.push_back(pattern(m, size_of(m)));
          std::vector<RequestPtr> reqs;
          for (int m = 0; m < kMessages; ++m) {
            reqs.push_back(comm.isend(1, p2p_tag(m % 3), data[m].data(), data[m].size()));
          }
          for (auto& r : reqs) r->wait(op_deadline());
          return;
        }
        std::mt19937 rng(5);
        int next[3] = {0, 1, 2};  // next message number expected on each tag
        std::vector<uint8_t> buf;
        while (next[0] < kMessages || next[1] < kMessages || next[2] < kMessages) {
          const int tag = static_cast<int>(rng() % 3);
          if (next[tag] >= kMessages) continue;
          const int m = next[tag];
          buf.assign(size_of(m), 0);
          comm.irecv(0, p2p_tag(tag), buf.data(), buf.size())->wait(op_deadline());
          ASSERT_EQ(buf, pattern(m, size_of(m))) << "message " << m;
          next[tag] += 3;
        }
      },
      options);
}

// 8 MiB arrive before their receive is posted, behind which a small message waits, with
// a ring of 4 KiB: the receive of the small one must take the large one off the way.
TEST_P(CommDeliveryTest, UnexpectedMessageLargerThanAnyInternalBuffer) {
  constexpr size_t kBig = (size_t{8} << 20) + 3;
  CommTestOptions options;
  options.ring_bytes = 4096;
  run(
      2,
      [&](Comm& comm) {
        const auto big = pattern(1, kBig);
        const auto small = pattern(2, 5);
        if (comm.rank() == 0) {
          auto s1 = comm.isend(1, p2p_tag(1), big.data(), big.size());
          auto s2 = comm.isend(1, p2p_tag(2), small.data(), small.size());
          s1->wait(op_deadline());
          s2->wait(op_deadline());
          return;
        }
        std::this_thread::sleep_for(20ms);
        std::vector<uint8_t> got_small(small.size());
        comm.irecv(0, p2p_tag(2), got_small.data(), got_small.size())->wait(op_deadline());
        EXPECT_EQ(got_small, small);
        std::vector<uint8_t> got_big(kBig);
        comm.irecv(0, p2p_tag(1), got_big.data(), kBig)->wait(op_deadline());
        EXPECT_EQ(got_big, big);
      },
      options);
}

// Zero-byte messages (null buffers) match like any other, in order with non-empty ones on
// their tag, whether their receive comes before or after them.
TEST_P(CommDeliveryTest, ZeroByteMessages) {
  run(2, [&](Comm& comm) {
    const uint64_t value = 0x1122334455667788u;
    if (comm.rank() == 0) {
      comm.isend(1, p2p_tag(1), nullptr, 0)->wait(op_deadline());
      comm.isend(1, p2p_tag(1), &value, sizeof(value))->wait(op_deadline());
      comm.isend(1, p2p_tag(2), nullptr, 0)->wait(op_deadline());
      comm.isend(1, p2p_tag(1), nullptr, 0)->wait(op_deadline());
      uint8_t byte = 0;
      comm.irecv(1, p2p_tag(3), nullptr, 0)->wait(op_deadline());  // posted before
      comm.irecv(1, p2p_tag(4), &byte, 0)->wait(op_deadline());
      return;
    }
    auto early = comm.irecv(0, p2p_tag(2), nullptr, 0);
    std::this_thread::sleep_for(20ms);  // the others arrive unexpected
    early->wait(op_deadline());
    comm.irecv(0, p2p_tag(1), nullptr, 0)->wait(op_deadline());
    uint64_t got = 0;
    comm.irecv(0, p2p_tag(1), &got, sizeof(got))->wait(op_deadline());
    EXPECT_EQ(got, value);
    comm.irecv(0, p2p_tag(1), nullptr, 0)->wait(op_deadline());
    std::this_thread::sleep_for(20ms);
    comm.isend(0, p2p_tag(3), nullptr, 0)->wait(op_deadline());
    comm.isend(0, p2p_tag(4), &got, 0)->wait(op_deadline());
    EXPECT_EQ(comm.error(), nullptr);
  });
}

// Both ranks send 200 messages of 64 KiB (13 MiB each way) and wait for all of them to
// complete before posting a single receive: the transport must take them in unexpected
// on both sides at once. Half share one tag (order matters), half have their own.
// Many messages both ways, none received yet: small ones (eager, each buffered over
// there) and large ones (rendezvous: only their descriptors wait over there).
TEST_P(CommDeliveryTest, ManyMessagesInFlightBothWaysBeforeAnyReceive) {
  for (size_t bytes : {size_t{1000} + 5, size_t{64 * 1024} + 5, size_t{(1 << 20) + 5}}) {
    many_messages_in_flight_both_ways(bytes);
  }
}

void CommDeliveryTest::many_messages_in_flight_both_ways(size_t bytes) {
  const int kMessages = bytes > 100 * 1024 ? 20 : 200;  // at most ~20 MiB each way
  auto tag_of = [](int m) { return m % 2 == 0 ? p2p_tag(1) : p2p_tag(1000 + m); };
  run(2, [&](Comm& comm) {
    const int me = comm.rank();
    const int peer = 1 - me;
    std::vector<std::vector<uint8_t>> out;
    for (int m = 0; m < kMessages; ++m) out.push_back(pattern(me * 10000 + m, bytes));
    std::vector<RequestPtr> sends;
    for (int m = 0; m < kMessages; ++m) {
      sends.push_back(comm.isend(peer, tag_of(m), out[m].data(), bytes));
    }
    // Small enough to complete unreceived (comm.h): all of them buffered over there. A
    // larger one completes only once its receive is posted: waited on after those.
    if (bytes < 4096) {
      for (auto& r : sends) r->wait(op_deadline());
    }
    std::vector<std::vector<uint8_t>> in(kMessages, std::vector<uint8_t>(bytes));
    std::vector<RequestPtr> recvs;
    for (int m = kMessages - 1; m >= 0; --m) {  // own tags in reverse, the shared tag in order
      if (m % 2 == 1) recvs.push_back(comm.irecv(peer, tag_of(m), in[m].data(), bytes));
    }
    for (int m = 0; m < kMessages; m += 2) {
      recvs.push_back(comm.irecv(peer, tag_of(m), in[m].data(), bytes));
    }
    for (auto& r : recvs) r->wait(op_deadline());
    for (auto& r : sends) r->wait(op_deadline());
    for (int m = 0; m < kMessages; ++m) {
      ASSERT_EQ(in[m], pattern(peer * 10000 + m, bytes)) << "message " << m;
    }
  });
}

// Every rank of a ring of 3 waits on a large send to its successor before it posts the
// receive from its predecessor: only progress made while waiting on the send (or in the
// background) keeps this from deadlocking.
TEST_P(CommDeliveryTest, LargeSendsWaitedOnBeforeTheirReceivesAreWaitedOn) {
  constexpr size_t kBytes = (size_t{8} << 20) + 11;
  constexpr int kWorld = 3;
  run(kWorld, [&](Comm& comm) {
    const int me = comm.rank();
    const int next = (me + 1) % kWorld;
    const int prev = (me + kWorld - 1) % kWorld;
    const auto out = pattern(me, kBytes);
    std::vector<uint8_t> in(kBytes);
    auto recv = comm.irecv(prev, 3, in.data(), kBytes);
    comm.isend(next, 3, out.data(), kBytes)->wait(op_deadline());
    recv->wait(op_deadline());
    ASSERT_EQ(in, pattern(prev, kBytes));
  });
}

// A large send completes only once its receive is posted (comm.h), and then with the
// right bytes, whichever side waits first.
TEST_P(CommDeliveryTest, LargeSendCompletesOnlyOnceItsReceiveIsPosted) {
  constexpr size_t kBytes = (size_t{4} << 20) + 3;
  run(2, [&](Comm& comm) {
    const auto out = pattern(7, kBytes);
    for (int round = 0; round < 2; ++round) {
      const uint64_t tag = p2p_tag(static_cast<uint32_t>(round));
      if (comm.rank() == 0) {
        auto send = comm.isend(1, tag, out.data(), kBytes);
        const auto until = std::chrono::steady_clock::now() + 200ms;
        while (std::chrono::steady_clock::now() < until) ASSERT_FALSE(send->test());
        uint8_t go = 1;
        comm.isend(1, p2p_tag(100), &go, 1)->wait(op_deadline());
        send->wait(op_deadline());
      } else {
        uint8_t go = 0;
        comm.irecv(0, p2p_tag(100), &go, 1)->wait(op_deadline());
        std::vector<uint8_t> in(kBytes);
        comm.irecv(0, tag, in.data(), kBytes)->wait(op_deadline());
        ASSERT_EQ(in, out) << "round " << round;
      }
    }
  });
}

// Rank 0 waits only on a receive from rank 2, which rank 2 sends only after rank 1's
// large send to rank 0 completed: waiting on one peer must keep every other peer's
// traffic moving. Once with rank 1's message unexpected, once with its receive posted
// (but not waited on).
TEST_P(CommDeliveryTest, WaiterOnOnePeerDoesNotStarveAnother) {
  constexpr size_t kBig = (size_t{8} << 20) + 1;
  run(3, [&](Comm& comm) {
    for (int round = 0; round < 2; ++round) {
      const auto big = pattern(round, kBig);
      const uint64_t tag = p2p_tag(static_cast<uint32_t>(round));
      uint64_t token = 0;
      switch (comm.rank()) {
        case 0: {
          std::vector<uint8_t> got(kBig);
          RequestPtr posted;
          if (round == 1) posted = comm.irecv(1, tag, got.data(), kBig);
          comm.irecv(2, tag, &token, sizeof(token))->wait(op_deadline());
          EXPECT_EQ(token, 2u + round);
          if (round == 0) posted = comm.irecv(1, tag, got.data(), kBig);
          posted->wait(op_deadline());
          ASSERT_EQ(got, big) << "round " << round;
          break;
        }
        case 1: {
          // Large: completes only once rank 0 posted its receive (comm.h).
          auto send = comm.isend(0, tag, big.data(), kBig);
          token = 1;
          comm.isend(2, tag, &token, sizeof(token))->wait(op_deadline());
          send->wait(op_deadline());
          break;
        }
        default:
          comm.irecv(1, tag, &token, sizeof(token))->wait(op_deadline());
          token = 2u + round;
          comm.isend(0, tag, &token, sizeof(token))->wait(op_deadline());
          break;
      }
    }
  });
}

// Two threads of each rank use one Comm at once, on the same peer and different tags.
TEST_P(CommDeliveryTest, ConcurrentThreadsOnOneComm) {
  constexpr int kRounds = 300;
  run(2, [&](Comm& comm) {
    const int peer = 1 - comm.rank();
    auto worker = [&](uint32_t lane) {
      for (int i = 0; i < kRounds; ++i) {
        const size_t bytes = static_cast<size_t>(i % 7 == 0 ? 200000 : i * 13);
        const auto out = pattern(lane * 100000 + i + comm.rank(), bytes);
        std::vector<uint8_t> in(bytes);
        auto r = comm.irecv(peer, p2p_tag(lane), in.data(), bytes);
        auto s = comm.isend(peer, p2p_tag(lane), out.data(), bytes);
        s->wait(op_deadline());
        r->wait(op_deadline());
        ASSERT_EQ(in, pattern(lane * 100000 + i + peer, bytes));
      }
    };
    std::thread other([&] { worker(1); });
    worker(2);
    other.join();
  });
}

// A message larger than a ring and a socket buffer completes by polling test() alone on
// both sides: test() makes progress where nothing else does.
TEST_P(CommDeliveryTest, TestAloneCompletesRequests) {
  constexpr size_t kBytes = (size_t{2} << 20) + 3;
  run(2, [&](Comm& comm) {
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

TDIST_FOR_EVERY_COMM_FACTORY(CommDeliveryTest);

}  // namespace
}  // namespace tdist::transport::testing
