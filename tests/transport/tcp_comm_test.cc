// What only the TCP transport has (the cases every transport shares are the conformance
// suite's, comm_conformance_*_test.cc; several sockets per peer are in
// tcp_comm_nsocks_test.cc): interface selection (TDIST_SOCKET_IFNAME), the wire's
// reserved tag, stray connections rejected by the handshake, and a throughput and latency
// report between two processes (printed, not asserted).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "net/address.h"
#include "net/interface.h"
#include "net/socket.h"
#include "support/scoped_env.h"
#include "tcp_test_util.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "transport/shm/shm_comm.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;
using test_support::ScopedEnv;

// The options' plain defaults (what a Comm made without the environment uses) are the
// settings' declared defaults, which from_settings() gives when nothing is set.
TEST(CommOptionsTest, PlainDefaultsAreTheDeclaredOnes) {
  ScopedEnv ifname("TDIST_SOCKET_IFNAME", std::nullopt);
  ScopedEnv buffer("TDIST_SOCKET_BUFFER_BYTES", std::nullopt);
  ScopedEnv nsocks("TDIST_SOCKET_NSOCKS_PERPEER", std::nullopt);
  ScopedEnv cert("TDIST_TLS_CERT", std::nullopt);
  ScopedEnv ring("TDIST_SHM_RING_BYTES", std::nullopt);
  const TcpCommOptions plain;
  const TcpCommOptions resolved = TcpCommOptions::from_settings();
  EXPECT_EQ(plain.ifname, resolved.ifname);
  EXPECT_EQ(plain.socket_buffer_bytes, resolved.socket_buffer_bytes);
  EXPECT_EQ(plain.nsocks_per_peer, resolved.nsocks_per_peer);
  EXPECT_EQ(plain.tls, resolved.tls);
  EXPECT_EQ(ShmCommOptions{}.ring_bytes, ShmCommOptions::from_settings().ring_bytes);
  ScopedEnv more("TDIST_SOCKET_NSOCKS_PERPEER", "3");
  EXPECT_EQ(TcpCommOptions::from_settings().nsocks_per_peer, 3);
  EXPECT_EQ(TcpCommOptions{}.nsocks_per_peer, 2);  // resolved where asked, not in the type
}

TEST(TcpCommInterfaceTest, IfnameSyntax) {
  using net::interface_matches;
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

// The wire's control tags (goodbye, abort) are not for messages.
TEST(TcpCommTest, ReservedWireTagIsInvalidArgument) {
  run_ranks(2, [&](Comm& comm) {
    uint64_t x = 0;
    EXPECT_THROW(comm.isend(1 - comm.rank(), ~uint64_t{0}, &x, 8), InvalidArgument);
  });
}

TEST(TcpCommSetupTest, StrayConnectionsAreRejectedAndSetupStillCompletes) {
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
  net::HostPort hp =
      net::parse_host_port(to_string(store->get("tcp/addr/0", Deadline::after(10s))));
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

// Two processes: 8-byte ping-pong latency and 64 MiB both-direction bandwidth, printed as a
// sanity figure (tdist-bench measures both properly). The rounds are few: on a loaded CI
// machine each round trip waits for the scheduler, and 20000 of them took 30 s.
TEST(TcpCommProcessTest, ThroughputAndLatencyReport) {
  StorePath store;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(fork_child([&, rank] {
      auto comm =
          connect_tcp_comm(std::make_shared<FileStore>(store.path()), rank, 2, test_options());
      const int peer = 1 - rank;
      uint64_t ping = 0;
      constexpr int kRounds = 2000;
      auto pingpong = [&](int rounds) {
        for (int i = 0; i < rounds; ++i) {
          if (rank == 0) {
            comm->isend(peer, 1, &ping, 8)->wait(Deadline::after(20s));
            comm->irecv(peer, 1, &ping, 8)->wait(Deadline::after(20s));
          } else {
            comm->irecv(peer, 1, &ping, 8)->wait(Deadline::after(20s));
            comm->isend(peer, 1, &ping, 8)->wait(Deadline::after(20s));
          }
        }
      };
      pingpong(100);
      auto start = Clock::now();
      pingpong(kRounds);
      double rtt_us =
          std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kRounds;
      constexpr size_t kBytes = size_t{64} << 20;
      constexpr int kIters = 4;
      std::vector<uint8_t> out(kBytes, static_cast<uint8_t>(rank));
      std::vector<uint8_t> in(kBytes);
      auto exchange = [&] {
        auto r = comm->irecv(peer, 2, in.data(), kBytes);
        auto s = comm->isend(peer, 2, out.data(), kBytes);
        s->wait(Deadline::after(30s));
        r->wait(Deadline::after(30s));
      };
      exchange();
      start = Clock::now();
      for (int i = 0; i < kIters; ++i) exchange();
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      if (rank == 0) {
        std::printf("[tcp transport] 8 B ping-pong round trip: %.1f us\n", rtt_us);
        std::printf("[tcp transport] 64 MiB both directions: %.2f GB/s per direction\n",
                    kIters * static_cast<double>(kBytes) / secs / 1e9);
      }
      return in[0] == static_cast<uint8_t>(peer) ? 0 : 4;
    }));
  }
  std::vector<int> codes = wait_children(pids);
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace tdist::transport::testing
