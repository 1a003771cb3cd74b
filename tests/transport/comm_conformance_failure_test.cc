// Comm conformance, errors and cancellation: every transport of comm_factories.h, ranks
// as threads. A wrong length fails only that receive (DesyncError naming both lengths);
// a deadline is TimeoutError and leaves the request pending; a destroyed pending receive
// is withdrawn and a destroyed started send still arrives in full; abort() fails every
// pending and later request on every rank within seconds, with its reason; a destroyed
// peer; setup naming a rank that never came; invalid arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

class CommFailureTest : public CommTest {
 protected:
  // Two ranks in this thread (rank 1 connected on another), for cases that destroy one.
  std::pair<std::unique_ptr<Comm>, std::unique_ptr<Comm>> connect_pair() const {
    auto store = std::make_shared<HashStore>();
    std::unique_ptr<Comm> c1;
    std::thread t([&] { c1 = connect(store, 1, 2); });
    auto c0 = connect(store, 0, 2);
    t.join();
    return {std::move(c0), std::move(c1)};
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Too short a receive posted before the message, too long a one posted after it arrived:
// each fails alone with DesyncError naming both lengths; the next message on the same
// tag, and on another, still arrives, and the Comm stays healthy.
TEST_P(CommFailureTest, WrongLengthFailsOnlyThatReceive) {
  constexpr size_t kShort = 4321;
  run(2, [&](Comm& comm) {
    const auto big = pattern(5, 3 * kTestRingBytes + 1);
    const auto small = pattern(6, 8);
    if (comm.rank() == 0) {
      for (uint32_t tag : {1, 3}) {
        comm.isend(1, p2p_tag(tag), big.data(), big.size())->wait(op_deadline());
        comm.isend(1, p2p_tag(tag), small.data(), small.size())->wait(op_deadline());
      }
      comm.isend(1, p2p_tag(4), small.data(), small.size())->wait(op_deadline());
      return;
    }
    std::vector<uint8_t> buf(kShort);
    std::string what = error_of<DesyncError>(
        [&] { comm.irecv(0, p2p_tag(1), buf.data(), kShort)->wait(op_deadline()); });
    EXPECT_TRUE(contains(what, std::to_string(big.size()))) << what;
    EXPECT_TRUE(contains(what, std::to_string(kShort))) << what;
    std::vector<uint8_t> got(8);
    comm.irecv(0, p2p_tag(1), got.data(), 8)->wait(op_deadline());
    EXPECT_EQ(got, small);
    std::this_thread::sleep_for(50ms);  // the next ones arrive unexpected
    std::vector<uint8_t> bigger(big.size() + 100);
    what = error_of<DesyncError>(
        [&] { comm.irecv(0, p2p_tag(3), bigger.data(), bigger.size())->wait(op_deadline()); });
    EXPECT_TRUE(contains(what, std::to_string(big.size()))) << what;
    EXPECT_TRUE(contains(what, std::to_string(bigger.size()))) << what;
    comm.irecv(0, p2p_tag(3), got.data(), 8)->wait(op_deadline());
    EXPECT_EQ(got, small);
    got.assign(8, 0);
    comm.irecv(0, p2p_tag(4), got.data(), 8)->wait(op_deadline());
    EXPECT_EQ(got, small);
    EXPECT_EQ(comm.error(), nullptr);
  });
}

// wait() at its deadline throws TimeoutError without aborting; the request stays pending
// (test() is false) and completes when its message comes.
TEST_P(CommFailureTest, DeadlineIsTimeoutErrorAndTheRequestStaysPending) {
  run(2, [&](Comm& comm) {
    uint64_t value = 0;
    if (comm.rank() == 1) {
      auto req = comm.irecv(0, p2p_tag(9), &value, sizeof(value));
      const auto start = Clock::now();
      EXPECT_THROW(req->wait(Deadline::after(100ms)), TimeoutError);
      EXPECT_GE(Clock::now() - start, 100ms);
      EXPECT_LT(Clock::now() - start, 5s);
      EXPECT_EQ(comm.error(), nullptr);
      EXPECT_FALSE(req->test());
      uint64_t go = 1;
      comm.isend(0, p2p_tag(8), &go, sizeof(go))->wait(op_deadline());
      req->wait(op_deadline());  // the same request completes later
      EXPECT_EQ(value, 42u);
    } else {
      uint64_t go = 0;
      comm.irecv(1, p2p_tag(8), &go, sizeof(go))->wait(op_deadline());
      value = 42;
      comm.isend(1, p2p_tag(9), &value, sizeof(value))->wait(op_deadline());
    }
  });
}

// A pending receive destroyed unfinished is withdrawn: the message goes to the next
// receive of its (source, tag). A started send destroyed unfinished still arrives in
// full, though its buffer is overwritten at once.
TEST_P(CommFailureTest, DestroyedPendingRequestsAreWithdrawnOrFinished) {
  constexpr size_t kBig = size_t{8} << 20;
  constexpr size_t kMid = 200 * 1000;
  run(2, [&](Comm& comm) {
    uint64_t a = 0;
    uint64_t go = 0;
    if (comm.rank() == 1) {
      { auto dropped = comm.irecv(0, p2p_tag(1), &a, sizeof(a)); }
      go = 1;
      comm.isend(0, p2p_tag(2), &go, sizeof(go))->wait(op_deadline());
      uint64_t b = 0;
      comm.irecv(0, p2p_tag(1), &b, sizeof(b))->wait(op_deadline());
      EXPECT_EQ(b, 7u);
      EXPECT_EQ(a, 0u);
      std::vector<uint8_t> big(kBig);
      comm.irecv(0, p2p_tag(3), big.data(), kBig)->wait(op_deadline());
      EXPECT_EQ(big, pattern(3, kBig));
      std::vector<uint8_t> mid(kMid);
      comm.irecv(0, p2p_tag(5), mid.data(), kMid)->wait(op_deadline());
      EXPECT_EQ(mid, pattern(5, kMid));
      comm.isend(0, p2p_tag(4), &go, sizeof(go))->wait(op_deadline());
      return;
    }
    comm.irecv(1, p2p_tag(2), &go, sizeof(go))->wait(op_deadline());
    a = 7;
    comm.isend(1, p2p_tag(1), &a, sizeof(a))->wait(op_deadline());
    // The only send in flight, so it starts at once; far larger than any buffer, so it
    // cannot have finished.
    auto out = pattern(3, kBig);
    { auto dropped = comm.isend(1, p2p_tag(3), out.data(), kBig); }
    std::fill(out.begin(), out.end(), 0);
    // Mid-sized (a single copy on shared memory, which the receiver may try before or
    // after the drop): the same.
    auto mid = pattern(5, kMid);
    { auto dropped = comm.isend(1, p2p_tag(5), mid.data(), kMid); }
    std::fill(mid.begin(), mid.end(), 0);
    comm.irecv(1, p2p_tag(4), &go, sizeof(go))->wait(op_deadline());  // keeps this rank going
  });
}

// Rank 3 aborts with a reason while ranks 0..2 wait on each other and on it: every
// pending request on every rank fails with PeerError carrying the reason, within
// seconds, and so does every later one.
TEST_P(CommFailureTest, AbortFailsEveryRequestOnEveryRankWithItsReason) {
  constexpr int kWorld = 4;
  run(kWorld, [&](Comm& comm) {
    const int me = comm.rank();
    uint64_t x = 0;
    uint64_t y = 0;
    if (me == kWorld - 1) {
      auto pending = comm.irecv(0, p2p_tag(5), &x, sizeof(x));
      std::this_thread::sleep_for(200ms);
      comm.abort(std::make_exception_ptr(PeerError("rank 3: user gave up")));
      std::string what = error_of<PeerError>([&] { pending->wait(Deadline::after(1s)); });
      EXPECT_TRUE(contains(what, "user gave up")) << what;
      what = error_of<PeerError>([&] { comm.isend(0, 1, &x, 8)->wait(Deadline::after(1s)); });
      EXPECT_TRUE(contains(what, "user gave up")) << what;
      EXPECT_NE(comm.error(), nullptr);
      return;
    }
    auto from_peer = comm.irecv((me + 1) % (kWorld - 1), p2p_tag(3), &x, sizeof(x));
    auto from_aborter = comm.irecv(kWorld - 1, p2p_tag(3), &y, sizeof(y));
    const auto start = Clock::now();
    std::string what = error_of<PeerError>([&] { from_peer->wait(Deadline::after(10s)); });
    EXPECT_LT(Clock::now() - start, 5s) << what;
    EXPECT_TRUE(contains(what, "user gave up")) << what;
    EXPECT_THROW(from_aborter->wait(Deadline::after(1s)), PeerError);
    EXPECT_NE(comm.error(), nullptr);
    // Later requests fail at once.
    EXPECT_THROW(comm.isend(me == 0 ? 1 : 0, 1, &x, 8)->wait(Deadline::after(1s)), PeerError);
    EXPECT_THROW(comm.irecv(me == 0 ? 1 : 0, 1, &x, 8)->wait(Deadline::after(1s)), PeerError);
  });
}

// abort() from another thread wakes a thread waiting on the same Comm; the peer learns
// of it too.
TEST_P(CommFailureTest, AbortWakesAWaiterOfTheSameComm) {
  run(2, [&](Comm& comm) {
    uint64_t x = 0;
    if (comm.rank() == 1) {
      EXPECT_THROW(comm.irecv(0, 1, &x, 8)->wait(Deadline::after(10s)), PeerError);
      return;
    }
    auto req = comm.irecv(1, 1, &x, 8);
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      comm.abort(nullptr);
    });
    const auto start = Clock::now();
    EXPECT_THROW(req->wait(Deadline::after(10s)), PeerError);
    aborter.join();
    EXPECT_LT(Clock::now() - start, 5s);
  });
}

TEST_P(CommFailureTest, PeerDestroyedWhileAReceiveFromItIsPendingIsPeerError) {
  auto pair = connect_pair();
  auto& c0 = pair.first;
  auto& c1 = pair.second;
  uint64_t x = 0;
  auto req = c0->irecv(1, 4, &x, 8);
  c1.reset();  // clean destroy, but rank 0 still waits for it
  std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(5s)); });
  EXPECT_TRUE(contains(what, "destroyed its Comm")) << what;
}

TEST_P(CommFailureTest, SendThatCannotGoOutToADestroyedPeerIsPeerError) {
  auto pair = connect_pair();
  auto& c0 = pair.first;
  auto& c1 = pair.second;
  c1.reset();
  const auto big = pattern(2, size_t{8} << 20);  // more than any buffer holds
  EXPECT_THROW(c0->isend(1, 1, big.data(), big.size())->wait(Deadline::after(5s)), PeerError);
}

// What a peer sent before destroying its Comm is still received afterwards; a receive
// after that can never complete, and says why.
TEST_P(CommFailureTest, MessagesSentBeforeACleanDestroyAreStillDelivered) {
  auto pair = connect_pair();
  auto& c0 = pair.first;
  auto& c1 = pair.second;
  const auto small = pattern(1, 100);
  c1->isend(0, 1, small.data(), small.size())->wait(Deadline::after(5s));
  c1.reset();
  std::vector<uint8_t> got(100);
  c0->irecv(1, 1, got.data(), got.size())->wait(Deadline::after(5s));
  EXPECT_EQ(got, small);
  std::string what = error_of<PeerError>(
      [&] { c0->irecv(1, 2, got.data(), got.size())->wait(Deadline::after(5s)); });
  EXPECT_TRUE(contains(what, "destroyed its Comm")) << what;
}

// Ranks 0 and 1 of 3 connect, rank 2 never comes: both fail with TimeoutError naming it.
TEST_P(CommFailureTest, SetupTimesOutNamingTheMissingRank) {
  auto store = std::make_shared<HashStore>();
  CommTestOptions options;
  options.setup_timeout = 500ms;
  std::string what0;
  std::thread t0([&] { what0 = error_of<TimeoutError>([&] { connect(store, 0, 3, options); }); });
  std::string what1 = error_of<TimeoutError>([&] { connect(store, 1, 3, options); });
  t0.join();
  EXPECT_TRUE(contains(what0, "rank 2")) << what0;
  EXPECT_TRUE(contains(what1, "rank 2")) << what1;
}

TEST_P(CommFailureTest, BadArgumentsAreInvalidArgument) {
  run(2, [&](Comm& comm) {
    uint64_t x = 0;
    const int peer = 1 - comm.rank();
    EXPECT_THROW(comm.isend(comm.rank(), 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(comm.rank(), 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.isend(2, 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(-1, 1, &x, 8), InvalidArgument);
    EXPECT_THROW(comm.irecv(peer, 1, nullptr, 8), InvalidArgument);
    EXPECT_THROW(comm.isend(peer, 1, nullptr, 8), InvalidArgument);
    EXPECT_EQ(comm.error(), nullptr);
  });
  EXPECT_THROW(connect(std::make_shared<HashStore>(), 2, 2), InvalidArgument);
  EXPECT_THROW(connect(std::make_shared<HashStore>(), -1, 2), InvalidArgument);
}

TDIST_FOR_EVERY_COMM_FACTORY(CommFailureTest);

}  // namespace
}  // namespace tdist::transport::testing
