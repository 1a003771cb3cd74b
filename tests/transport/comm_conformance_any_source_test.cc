// Comm conformance, receiving from any source (comm.h's irecv_any): every transport of
// comm_factories.h, ranks as threads. Every rank sends rank 0 one message and rank 0 gets
// each sender once, small (eager) and large (rendezvous), posted before and after the
// messages arrived; receives of one source and of any share a tag in posting order (MPI's
// rule) and arrived messages go in arrival order; tags apart; a concurrent mix that keeps
// each sender's order; a wrong length, a deadline, a withdrawn receive, an abort and bad
// arguments.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kData = p2p_tag(5);
constexpr uint64_t kNotice = p2p_tag(6);  // "my messages went" / "go ahead"

class CommAnySourceTest : public CommTest {};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Payload number `index` of rank `from`.
std::vector<uint8_t> message(int from, int index, size_t bytes) {
  return pattern(static_cast<uint64_t>(from) * 1000 + static_cast<uint64_t>(index), bytes);
}

void notify(Comm& comm, int peer) {
  uint8_t one = 1;
  comm.isend(peer, kNotice, &one, 1)->wait(op_deadline());
}

void await_notice(Comm& comm, int peer) {
  uint8_t got = 0;
  comm.irecv(peer, kNotice, &got, 1)->wait(op_deadline());
}

// Every rank but 0 sends rank 0 one message with the same tag; rank 0 receives world - 1
// times from any source and gets each sender exactly once, with its payload. `early`: the
// receives are posted before anything is sent; else every message (a rendezvous its
// descriptor) arrived before them.
void every_sender_once(const CommFactory& factory, int world, size_t bytes, bool early) {
  run_factory_ranks(factory, world, [&](Comm& comm) {
    const int me = comm.rank();
    if (me != 0) {
      const auto out = message(me, 0, bytes);
      if (early) await_notice(comm, 0);
      auto send = comm.isend(0, kData, out.data(), bytes);  // a rendezvous waits for rank 0
      if (!early) notify(comm, 0);
      send->wait(op_deadline());
      return;
    }
    if (!early) {
      for (int r = 1; r < world; ++r) await_notice(comm, r);  // sent before its notice
    }
    std::vector<std::vector<uint8_t>> in(static_cast<size_t>(world), std::vector<uint8_t>(bytes));
    std::vector<RequestPtr> reqs;
    for (int i = 1; i < world; ++i) reqs.push_back(comm.irecv_any(kData, in[i].data(), bytes));
    if (early) {
      EXPECT_EQ(reqs.front()->source(), -1);  // nothing was sent yet
    }
    if (early) {
      for (int r = 1; r < world; ++r) notify(comm, r);
    }
    std::vector<int> seen(static_cast<size_t>(world), 0);
    for (int i = 1; i < world; ++i) {
      reqs[i - 1]->wait(op_deadline());
      const int from = reqs[i - 1]->source();
      ASSERT_TRUE(from >= 1 && from < world) << from;
      ++seen[static_cast<size_t>(from)];
      EXPECT_EQ(in[i], message(from, 0, bytes)) << "receive " << i << " from " << from;
    }
    for (int r = 1; r < world; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "rank " << r;
  });
}

TEST_P(CommAnySourceTest, EverySenderOnceSmallAndLargePostedBeforeAndAfter) {
  for (int world : {2, 3, 4}) {
    for (size_t bytes : {size_t{8}, size_t{0}, size_t{4} << 20}) {
      for (bool early : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "world " << world << ", " << bytes << " bytes, "
                                          << (early ? "posted first" : "arrived first"));
        every_sender_once(factory(), world, bytes, early);
      }
    }
  }
}

// Posted before the messages: rank 0 posts any, then rank 1's, then any; rank 1's two
// messages go to the first two in posting order, rank 2's (sent only then) to the third.
TEST_P(CommAnySourceTest, ReceivesOfOneSourceAndOfAnyTakeMessagesInPostingOrder) {
  for (size_t bytes : {size_t{24}, size_t{2} << 20}) {
    run(3, [&](Comm& comm) {
      const int me = comm.rank();
      if (me != 0) {
        await_notice(comm, 0);
        std::vector<RequestPtr> sends;
        const auto a = message(me, 0, bytes);
        const auto b = message(me, 1, bytes);
        sends.push_back(comm.isend(0, kData, a.data(), bytes));
        if (me == 1) sends.push_back(comm.isend(0, kData, b.data(), bytes));
        for (auto& s : sends) s->wait(op_deadline());
        return;
      }
      std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(bytes));
      auto first = comm.irecv_any(kData, in[0].data(), bytes);
      auto of_one = comm.irecv(1, kData, in[1].data(), bytes);
      auto third = comm.irecv_any(kData, in[2].data(), bytes);
      notify(comm, 1);
      of_one->wait(op_deadline());
      first->wait(op_deadline());
      EXPECT_EQ(first->source(), 1);
      EXPECT_EQ(of_one->source(), 1);
      EXPECT_EQ(in[0], message(1, 0, bytes));
      EXPECT_EQ(in[1], message(1, 1, bytes));
      EXPECT_FALSE(third->test());
      notify(comm, 2);
      third->wait(op_deadline());
      EXPECT_EQ(third->source(), 2);
      EXPECT_EQ(in[2], message(2, 0, bytes));
    });
  }
}

// Arrived before the receives, rank 1's two messages before rank 2's one: receives of any
// take them in arrival order, around a receive of rank 2 posted between them.
TEST_P(CommAnySourceTest, ArrivedMessagesGoInArrivalOrder) {
  for (size_t bytes : {size_t{24}, size_t{2} << 20}) {
    run(3, [&](Comm& comm) {
      const int me = comm.rank();
      if (me != 0) {
        if (me == 2) await_notice(comm, 0);
        const auto a = message(me, 0, bytes);
        const auto b = message(me, 1, bytes);
        auto s1 = comm.isend(0, kData, a.data(), bytes);
        auto s2 = me == 1 ? comm.isend(0, kData, b.data(), bytes) : nullptr;
        notify(comm, 0);
        s1->wait(op_deadline());
        if (s2) s2->wait(op_deadline());
        return;
      }
      await_notice(comm, 1);  // rank 1's messages are here: only now may rank 2 send
      notify(comm, 2);
      await_notice(comm, 2);
      std::vector<std::vector<uint8_t>> in(4, std::vector<uint8_t>(bytes));
      auto first = comm.irecv_any(kData, in[0].data(), bytes);
      auto of_two = comm.irecv(2, kData, in[1].data(), bytes);
      auto second = comm.irecv_any(kData, in[2].data(), bytes);
      for (auto* r : {&first, &of_two, &second}) (*r)->wait(op_deadline());
      EXPECT_EQ(first->source(), 1);
      EXPECT_EQ(in[0], message(1, 0, bytes));
      EXPECT_EQ(in[1], message(2, 0, bytes));
      EXPECT_EQ(second->source(), 1);
      EXPECT_EQ(in[2], message(1, 1, bytes));
    });
  }
}

// Receives of any on two tags take only their own tag's message; a receive of any that is
// destroyed pending is withdrawn, and the message goes to the next one.
TEST_P(CommAnySourceTest, TagsAreMatchedApartAndADestroyedReceiveIsWithdrawn) {
  run(3, [&](Comm& comm) {
    const int me = comm.rank();
    if (me != 0) {
      await_notice(comm, 0);
      const auto out = message(me, 0, 100 * static_cast<size_t>(me));
      comm.isend(0, p2p_tag(10 + me), out.data(), out.size())->wait(op_deadline());
      return;
    }
    std::vector<uint8_t> dropped(200);
    { auto withdrawn = comm.irecv_any(p2p_tag(12), dropped.data(), 200); }
    std::vector<uint8_t> from1(100);
    std::vector<uint8_t> from2(200);
    auto on12 = comm.irecv_any(p2p_tag(12), from2.data(), 200);
    auto on11 = comm.irecv_any(p2p_tag(11), from1.data(), 100);
    notify(comm, 2);
    notify(comm, 1);
    on11->wait(op_deadline());
    on12->wait(op_deadline());
    EXPECT_EQ(on11->source(), 1);
    EXPECT_EQ(on12->source(), 2);
    EXPECT_EQ(from1, message(1, 0, 100));
    EXPECT_EQ(from2, message(2, 0, 200));
    EXPECT_EQ(dropped, std::vector<uint8_t>(200));
  });
}

// Three senders, `per_sender` messages each, sent while rank 0 posts a random mix of
// receives of one source and of any (each of one source posted only where no earlier
// receive of any can leave it without a message). Every message arrives exactly once,
// each receive of one source gets its source's, and each sender's messages land in its
// receives in posting order (MPI's non-overtaking rule).
void concurrent_mix(const CommFactory& factory, int per_sender, size_t bytes) {
  constexpr int kWorld = 4;
  run_factory_ranks(factory, kWorld, [&](Comm& comm) {
    const int me = comm.rank();
    if (me != 0) {
      std::vector<std::vector<uint8_t>> out;
      std::vector<RequestPtr> sends;
      for (int m = 0; m < per_sender; ++m) out.push_back(message(me, m, bytes));
      for (int m = 0; m < per_sender; ++m) {
        sends.push_back(comm.isend(0, kData, out[m].data(), bytes));
      }
      for (auto& s : sends) s->wait(op_deadline());
      return;
    }
    const int total = per_sender * (kWorld - 1);
    std::mt19937 rng(7);
    std::vector<int> peer_of(static_cast<size_t>(total));  // kAnySource or the source
    std::vector<int> specific(kWorld, 0);
    int anys = 0;
    for (int& p : peer_of) {
      const int pick = static_cast<int>(rng() % kWorld);  // 0: any
      p = pick != 0 && anys + specific[pick] + 1 <= per_sender ? pick : kAnySource;
      if (p == kAnySource) ++anys;
      if (p != kAnySource) ++specific[p];
    }
    std::vector<std::vector<uint8_t>> in(static_cast<size_t>(total), std::vector<uint8_t>(bytes));
    std::vector<RequestPtr> reqs;
    for (int i = 0; i < total; ++i) {
      reqs.push_back(peer_of[i] == kAnySource ? comm.irecv_any(kData, in[i].data(), bytes)
                                              : comm.irecv(peer_of[i], kData, in[i].data(), bytes));
    }
    std::vector<int> next(kWorld, 0);  // per sender: the message its next receive must hold
    for (int i = 0; i < total; ++i) {
      reqs[i]->wait(op_deadline());
      const int from = reqs[i]->source();
      ASSERT_TRUE(from >= 1 && from < kWorld) << "receive " << i;
      if (peer_of[i] != kAnySource) {
        EXPECT_EQ(from, peer_of[i]) << "receive " << i;
      }
      EXPECT_EQ(in[i], message(from, next[from]++, bytes)) << "receive " << i << " from " << from;
    }
    for (int r = 1; r < kWorld; ++r) EXPECT_EQ(next[r], per_sender) << "rank " << r;
  });
}

TEST_P(CommAnySourceTest, ConcurrentMixKeepsEachSendersOrder) {
  concurrent_mix(factory(), 150, 40);
  concurrent_mix(factory(), 12, 3 * kTestRingBytes + 5);  // streamed through a ring
  concurrent_mix(factory(), 4, (size_t{1} << 20) + 3);    // rendezvous
}

// A message of another length fails that receive alone with DesyncError naming both
// lengths and the sender, as irecv's; the next message still arrives.
TEST_P(CommAnySourceTest, WrongLengthIsDesyncErrorAndTheCommStaysHealthy) {
  run(2, [&](Comm& comm) {
    const auto big = message(1, 0, 5000);
    const auto small = message(1, 1, 8);
    if (comm.rank() == 1) {
      comm.isend(0, kData, big.data(), big.size())->wait(op_deadline());
      comm.isend(0, kData, small.data(), small.size())->wait(op_deadline());
      return;
    }
    std::vector<uint8_t> buf(8);
    const std::string what =
        error_of<DesyncError>([&] { comm.irecv_any(kData, buf.data(), 8)->wait(op_deadline()); });
    EXPECT_TRUE(contains(what, "5000") && contains(what, " 8 bytes")) << what;
    EXPECT_TRUE(contains(what, "rank 1")) << what;
    auto next = comm.irecv_any(kData, buf.data(), 8);
    next->wait(op_deadline());
    EXPECT_EQ(buf, small);
    EXPECT_EQ(next->source(), 1);
    EXPECT_EQ(comm.error(), nullptr);
  });
}

// wait() at its deadline is TimeoutError naming a receive from any rank; the receive stays
// pending and completes when a message comes.
TEST_P(CommAnySourceTest, DeadlineIsTimeoutErrorAndTheReceiveStaysPending) {
  run(3, [&](Comm& comm) {
    uint64_t value = 0;
    if (comm.rank() == 0) {
      auto req = comm.irecv_any(kData, &value, sizeof(value));
      const std::string what = error_of<TimeoutError>([&] { req->wait(Deadline::after(100ms)); });
      EXPECT_TRUE(contains(what, "receive from any rank")) << what;
      EXPECT_FALSE(req->test());
      EXPECT_EQ(req->source(), -1);
      notify(comm, 2);
      req->wait(op_deadline());
      EXPECT_EQ(value, 42u);
      EXPECT_EQ(req->source(), 2);
    } else if (comm.rank() == 2) {
      await_notice(comm, 0);
      value = 42;
      comm.isend(0, kData, &value, sizeof(value))->wait(op_deadline());
    }
  });
}

// An abort on a peer fails a pending receive from any rank with its reason within
// seconds, and a later one at once.
TEST_P(CommAnySourceTest, AbortFailsPendingAndLaterReceives) {
  run(3, [&](Comm& comm) {
    uint64_t x = 0;
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(200ms);
      comm.abort(std::make_exception_ptr(PeerError("rank 2: user gave up")));
      return;
    }
    auto pending = comm.irecv_any(kData, &x, sizeof(x));
    const auto start = Clock::now();
    std::string what = error_of<PeerError>([&] { pending->wait(Deadline::after(10s)); });
    EXPECT_LT(Clock::now() - start, 5s) << what;
    EXPECT_TRUE(contains(what, "user gave up")) << what;
    what = error_of<PeerError>(
        [&] { comm.irecv_any(kData, &x, sizeof(x))->wait(Deadline::after(1s)); });
    EXPECT_TRUE(contains(what, "user gave up")) << what;
  });
}

TEST_P(CommAnySourceTest, BadArgumentsAreInvalidArgument) {
  run(1, [&](Comm& comm) {
    uint64_t x = 0;
    EXPECT_THROW(comm.irecv_any(kData, &x, 8), InvalidArgument);  // nobody to send
  });
  run(2, [&](Comm& comm) {
    uint64_t x = 0;
    EXPECT_THROW(comm.irecv_any(collective_tag(3, 1), &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv_any(~uint64_t{0}, &x, 8), InvalidArgument);  // the transport's
    EXPECT_THROW(comm.irecv_any(kData, nullptr, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv_any_device(kData, &x, 8), InvalidArgument);  // host channels
    EXPECT_EQ(comm.error(), nullptr);
  });
}

TDIST_FOR_EVERY_COMM_FACTORY(CommAnySourceTest);

}  // namespace
}  // namespace tdist::transport::testing
