// TCP transport failures with ranks as threads: abort() reaching every rank, setup that
// times out naming the missing rank, stray connections rejected by the handshake, and
// requests after an abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "net/address.h"
#include "net/socket.h"
#include "tcp_test_util.h"
#include "transport/shm/shm_comm.h"
#include "tdist/error.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

TEST(TcpCommFailureTest, AbortOnOneRankFailsPendingReceivesEverywhere) {
  constexpr int kWorld = 4;
  run_ranks(kWorld, [&](Comm& comm) {
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
    EXPECT_NE(what.find("(no exception)"), 0u);
    EXPECT_NE(comm.error(), nullptr);
    // Later requests fail at once.
    EXPECT_THROW(comm.isend(0 == me ? 1 : 0, 1, &x, 8)->wait(Deadline::after(1s)), PeerError);
  });
}

TEST(TcpCommFailureTest, SetupTimesOutNamingTheMissingRank) {
  auto store = std::make_shared<HashStore>();
  TcpCommOptions options = test_options();
  options.timeout = 500ms;
  std::string what0;
  std::string what1;
  std::thread t0(
      [&] { what0 = error_of<TimeoutError>([&] { connect_tcp_comm(store, 0, 3, options); }); });
  what1 = error_of<TimeoutError>([&] { connect_tcp_comm(store, 1, 3, options); });
  t0.join();
  EXPECT_NE(what0.find("rank 2: it never connected"), std::string::npos) << what0;
  EXPECT_EQ(what0.find("rank 1:"), std::string::npos) << what0;
  EXPECT_NE(what1.find("rank 2: it never connected"), std::string::npos) << what1;
}

TEST(TcpCommFailureTest, StrayConnectionsAreRejectedAndSetupStillCompletes) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Comm>> comms(3);
  std::vector<std::thread> threads;
  // Rank 2's host key, so that ranks 0 and 1 start connecting before rank 2 arrives.
  store->set("host_key/2", shm_host_key());
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { comms[r] = connect_tcp_comm(store, r, 3, test_options()); });
  }
  // A stranger connects to rank 0 and sends garbage; another claims to be rank 2 of a
  // different group.
  net::HostPort hp = net::parse_host_port(to_string(store->get("tcp/addr/0", Deadline::after(10s))));
  net::Fd garbage = net::connect_tcp(hp.host, hp.port, Deadline::after(10s));
  std::string junk(24, 'x');
  net::write_full(garbage.get(), junk.data(), junk.size(), Deadline::after(5s), "rank 0");
  net::Fd stale = net::connect_tcp(hp.host, hp.port, Deadline::after(10s));
  uint8_t hello[24] = {0x54, 0x43, 0x64, 0x74, 1, 0, 0, 0, 2, 0, 0, 0, 0,
                       0,    0,    0,    1,    2, 3, 4, 5, 6, 7, 8};  // group id 0x0807060504030201
  net::write_full(stale.get(), hello, sizeof(hello), Deadline::after(5s), "rank 0");
  threads.emplace_back([&] { comms[2] = connect_tcp_comm(store, 2, 3, test_options()); });
  for (auto& t : threads) t.join();
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  uint32_t v = 5;
  uint32_t got = 0;
  auto r = comms[0]->irecv(2, 1, &got, 4);
  comms[2]->isend(0, 1, &v, 4)->wait(Deadline::after(10s));
  r->wait(Deadline::after(10s));
  EXPECT_EQ(got, 5u);
}

TEST(TcpCommFailureTest, PeerDestroyedWhileAReceiveFromItIsPendingIsPeerError) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<Comm> c1;
  std::thread t([&] { c1 = connect_tcp_comm(store, 1, 2, test_options()); });
  auto c0 = connect_tcp_comm(store, 0, 2, test_options());
  t.join();
  uint64_t x = 0;
  auto req = c0->irecv(1, 4, &x, 8);
  c1.reset();  // clean destroy, but rank 0 still waits for it
  std::string what = error_of<PeerError>([&] { req->wait(Deadline::after(5s)); });
  EXPECT_NE(what.find("destroyed its Comm"), std::string::npos) << what;
}

}  // namespace
}  // namespace tdist::transport::testing
