// Shared-memory transport failures with ranks as threads: abort() reaching every rank,
// setup that times out naming the missing rank, stray connections rejected by the
// handshake, a peer destroyed while a receive from it is pending, and messages sent just
// before a clean destroy still delivered.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "net/fd.h"
#include "shm_test_util.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

TEST(ShmCommFailureTest, AbortOnOneRankFailsPendingReceivesEverywhere) {
  constexpr int kWorld = 4;
  run_shm_ranks(kWorld, [&](Comm& comm) {
    const int me = comm.rank();
    if (me == kWorld - 1) {
      std::this_thread::sleep_for(200ms);
      comm.abort(std::make_exception_ptr(PeerError("rank 3: user gave up")));
      std::string what = error_of<PeerError>([&] {
        uint64_t x = 0;
        comm.irecv(0, 1, &x, 8)->wait(Deadline::after(1s));
      });
      EXPECT_NE(what.find("user gave up"), std::string::npos) << what;
      return;
    }
    // Ranks 0..2 wait on each other, not on rank 3.
    uint64_t x = 0;
    auto req = comm.irecv((me + 1) % (kWorld - 1), p2p_tag(3), &x, sizeof(x));
    const auto start = Clock::now();
    std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(10s)); });
    EXPECT_LT(Clock::now() - start, 2s) << what;
    EXPECT_NE(what.find("user gave up"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 3 (shm pid"), std::string::npos) << what;
    EXPECT_NE(comm.error(), nullptr);
    // Later requests fail at once.
    EXPECT_THROW(comm.isend(0 == me ? 1 : 0, 1, &x, 8)->wait(Deadline::after(1s)), PeerError);
  });
}

TEST(ShmCommFailureTest, AbortWakesAWaiterOfTheSameComm) {
  run_shm_ranks(2, [&](Comm& comm) {
    uint64_t x = 0;
    if (comm.rank() == 1) {  // learns of the abort through the notice
      std::string what =
          error_of<PeerError>([&] { comm.irecv(0, 1, &x, 8)->wait(Deadline::after(10s)); });
      EXPECT_NE(what.find("rank 1: rank 0 (shm pid"), std::string::npos) << what;
      EXPECT_NE(what.find("aborted its Comm: rank 0: the Comm was aborted"), std::string::npos)
          << what;
      return;
    }
    auto req = comm.irecv(1, 1, &x, 8);
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      comm.abort(nullptr);
    });
    const auto start = Clock::now();
    std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(10s)); });
    aborter.join();
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_NE(what.find("aborted"), std::string::npos) << what;
  });
}

TEST(ShmCommFailureTest, SetupTimesOutNamingTheMissingRank) {
  auto store = std::make_shared<HashStore>();
  ShmCommOptions options = shm_options();
  options.timeout = 500ms;
  std::string what0;
  std::string what1;
  std::thread t0(
      [&] { what0 = error_of<TimeoutError>([&] { connect_shm_comm(store, 0, 3, options); }); });
  what1 = error_of<TimeoutError>([&] { connect_shm_comm(store, 1, 3, options); });
  t0.join();
  EXPECT_NE(what0.find("rank 2: it never connected"), std::string::npos) << what0;
  EXPECT_EQ(what0.find("rank 1:"), std::string::npos) << what0;
  EXPECT_NE(what1.find("rank 2: it never connected"), std::string::npos) << what1;
}

TEST(ShmCommFailureTest, StrayConnectionsAreRejectedAndSetupStillCompletes) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Comm>> comms(3);
  // The host keys of ranks 1 and 2, so that rank 0 starts linking before they arrive.
  store->set("host_key/1", shm_host_key());
  store->set("host_key/2", shm_host_key());
  std::thread t0([&] { comms[0] = connect_shm_comm(store, 0, 3, shm_options()); });
  // Strangers connect to rank 0's socket: one sends garbage, one closes at once.
  Bytes nonce_bytes = store->get("shm/nonce", Deadline::after(10s));
  uint64_t nonce = 0;
  std::memcpy(&nonce, nonce_bytes.data(), sizeof(nonce));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  int n = std::snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "tdist-shm-%016llx-0",
                        static_cast<unsigned long long>(nonce));
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  std::vector<net::Fd> strangers;
  for (int i = 0; i < 2; ++i) {
    net::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const auto give_up = Clock::now() + 10s;
    while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      ASSERT_LT(Clock::now(), give_up) << std::strerror(errno);
      std::this_thread::sleep_for(5ms);
    }
    strangers.push_back(std::move(fd));
  }
  std::string junk(40, 'x');
  ASSERT_EQ(::send(strangers[0].get(), junk.data(), junk.size(), 0), 40);
  strangers[1].reset();
  std::thread t1([&] { comms[1] = connect_shm_comm(store, 1, 3, shm_options()); });
  std::thread t2([&] { comms[2] = connect_shm_comm(store, 2, 3, shm_options()); });
  t0.join();
  t1.join();
  t2.join();
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  uint32_t v = 5;
  uint32_t got = 0;
  auto r = comms[0]->irecv(2, 1, &got, 4);
  comms[2]->isend(0, 1, &v, 4)->wait(Deadline::after(10s));
  r->wait(Deadline::after(10s));
  EXPECT_EQ(got, 5u);
}

TEST(ShmCommFailureTest, PeerDestroyedWhileAReceiveFromItIsPendingIsPeerError) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_shm_comm(store, 1, 2, shm_options()); });
  auto c0 = connect_shm_comm(store, 0, 2, shm_options());
  t.join();
  uint64_t x = 0;
  auto req = c0->irecv(1, 4, &x, 8);
  c1.reset();  // clean destroy, but rank 0 still waits for it
  std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(5s)); });
  EXPECT_NE(what.find("destroyed its Comm"), std::string::npos) << what;
}

TEST(ShmCommFailureTest, SendThatCannotGoOutToADestroyedPeerIsPeerError) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_shm_comm(store, 1, 2, shm_options()); });
  auto c0 = connect_shm_comm(store, 0, 2, shm_options());
  t.join();
  c1.reset();
  const auto big = pattern(2, 3 * kSmallRing);  // more than the ring holds
  std::string what = error_of<PeerError>(
      [&] { c0->isend(1, 1, big.data(), big.size())->wait(Deadline::after(5s)); });
  EXPECT_NE(what.find("destroyed its Comm while 1 send(s)"), std::string::npos) << what;
}

// What a peer sent before destroying its Comm is still received afterwards (the ring
// outlives the sender's mapping), including a send it never waited on.
TEST(ShmCommFailureTest, MessagesSentBeforeACleanDestroyAreStillDelivered) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_shm_comm(store, 1, 2, shm_options()); });
  auto c0 = connect_shm_comm(store, 0, 2, shm_options());
  t.join();
  const auto small = pattern(1, 100);
  c1->isend(0, 1, small.data(), small.size())->wait(Deadline::after(5s));
  c1.reset();
  std::vector<uint8_t> got(100);
  c0->irecv(1, 1, got.data(), got.size())->wait(Deadline::after(5s));
  EXPECT_EQ(got, small);
  EXPECT_EQ(c0->error(), nullptr);
  // A receive after that can never complete, and says why.
  std::string what = error_of<PeerError>(
      [&] { c0->irecv(1, 2, got.data(), got.size())->wait(Deadline::after(5s)); });
  EXPECT_NE(what.find("destroyed its Comm"), std::string::npos) << what;
}

}  // namespace
}  // namespace tdist::transport::testing
