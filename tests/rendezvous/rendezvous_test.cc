// In-process rendezvous: ranks as threads over a HashStore or a TCPStore hosted by the
// rank-0 thread, plus the failure paths (duplicate ranks, mismatched world sizes, a round
// that never fills, an unreachable store, a taken port).
#include "tdist/rendezvous.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store_bind.h"
#include "rendezvous/test_util.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"

namespace tdist {
namespace {

using rdzv_test::free_port;
using rdzv_test::ScopedEnv;
using std::chrono::milliseconds;

// Runs fn(rank) on `n` threads; returns each thread's exception message ("" when none).
std::vector<std::string> run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string prefix_of(const std::shared_ptr<Store>& store) {
  auto* prefixed = dynamic_cast<PrefixStore*>(store.get());
  return prefixed == nullptr ? "(not a PrefixStore)" : prefixed->prefix();
}

// Each rank publishes its rank and reads everyone's.
void exchange(Store& store, int rank, int world_size) {
  store.set("r" + std::to_string(rank), std::to_string(rank));
  for (int i = 0; i < world_size; ++i) {
    EXPECT_EQ(to_string(store.get("r" + std::to_string(i))), std::to_string(i));
  }
}

TEST(RendezvousJoin, ThreadsOnAGivenStoreGetFreshNamespacesPerRound) {
  constexpr int kWorld = 4;
  auto base = std::make_shared<HashStore>();
  for (int round = 0; round < 3; ++round) {
    std::vector<RendezvousResult> results(kWorld);
    auto errors = run_ranks(kWorld, [&](int rank) {
      results[rank] = rendezvous(base, rank, kWorld, milliseconds(10'000));
      exchange(*results[rank].store, rank, kWorld);
    });
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_EQ(errors[rank], "") << "rank " << rank;
      EXPECT_EQ(results[rank].rank, rank);
      EXPECT_EQ(results[rank].world_size, kWorld);
      EXPECT_EQ(prefix_of(results[rank].store), "tdist/pg/" + std::to_string(round));
      EXPECT_EQ(results[rank].store->timeout(), milliseconds(10'000));
    }
  }
}

TEST(RendezvousJoin, TcpUrlWithRankZeroHostingInProcess) {
  ScopedEnv env;
  constexpr int kWorld = 3;
  const uint16_t port = free_port();
  ASSERT_NE(port, 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port) + "?world_size=3";
  std::vector<RendezvousResult> results(kWorld);
  auto errors = run_ranks(kWorld, [&](int rank) {
    results[rank] = rendezvous(url, rank, -1, milliseconds(20'000));
    exchange(*results[rank].store, rank, kWorld);
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(results[rank].rank, rank);
    EXPECT_EQ(results[rank].world_size, kWorld);
  }
}

TEST(RendezvousJoin, WorldOfOneOverEnv) {
  ScopedEnv env;
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(free_port()));
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  RendezvousResult r = rendezvous("env://", -1, -1, milliseconds(10'000));
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
  r.store->set("k", "v");
  EXPECT_EQ(to_string(r.store->get("k")), "v");
}

// The local address a listening TCP socket on `port` is bound to, as /proc/net/tcp writes
// it (hex, e.g. "0100007F" for 127.0.0.1); empty when none listens.
std::string listening_address(uint16_t port) {
  std::ifstream in("/proc/self/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  char want[8];
  std::snprintf(want, sizeof(want), ":%04X", port);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == want) {
      return local.substr(0, local.size() - 5);
    }
  }
  return "";
}

// Rank 0's store listens where MASTER_ADDR points, not on every interface, unless
// TDIST_STORE_BIND says otherwise (issue 14).
TEST(RendezvousJoin, StoreListensOnTheRendezvousAddressOnly) {
  for (const char* bind : {"", "0.0.0.0"}) {
    ScopedEnv env;
    const uint16_t port = free_port();
    env.set("MASTER_ADDR", "127.0.0.1");
    env.set("MASTER_PORT", std::to_string(port));
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "1");
    env.set("TDIST_STORE_BIND", bind);
    RendezvousResult r = rendezvous("env://", -1, -1, milliseconds(10'000));
    EXPECT_EQ(listening_address(port), *bind == '\0' ? "0100007F" : "00000000") << bind;
  }
  EXPECT_EQ(rendezvous_detail::store_listen_host("127.0.0.1"), "127.0.0.1");
  const std::string localhost = rendezvous_detail::store_listen_host("localhost");
  EXPECT_TRUE(localhost.rfind("127.", 0) == 0 || localhost == "::1") << localhost;
  // 192.0.2.1 (TEST-NET-1) is never this host's: every interface, with a log line.
  EXPECT_EQ(rendezvous_detail::store_listen_host("192.0.2.1"), "0.0.0.0");
}

TEST(RendezvousJoin, DuplicateRankFailsEveryRankFast) {
  auto base = std::make_shared<HashStore>();
  const std::vector<int> ranks = {0, 1, 1};
  auto start = Clock::now();
  auto errors = run_ranks(3, [&](int i) { rendezvous(base, ranks[i], 3, milliseconds(20'000)); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("rank 1 was claimed by two processes"), std::string::npos) << e;
  }
}

TEST(RendezvousJoin, MismatchedWorldSizesFail) {
  auto base = std::make_shared<HashStore>();
  auto errors = run_ranks(
      2, [&](int rank) { rendezvous(base, rank, rank == 0 ? 2 : 3, milliseconds(20'000)); });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("every rank must use the same world size"), std::string::npos) << e;
  }
}

TEST(RendezvousJoin, RoundThatNeverFillsTimesOutSayingHowManyJoined) {
  auto base = std::make_shared<HashStore>();
  auto start = Clock::now();
  try {
    rendezvous(base, 0, 2, milliseconds(300));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 ranks joined"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(RendezvousJoin, GivenStoreArgumentsAreValidated) {
  auto base = std::make_shared<HashStore>();
  EXPECT_THROW(rendezvous(std::shared_ptr<Store>(), 0, 1), InvalidArgument);
  EXPECT_THROW(rendezvous(base, 0, 0), InvalidArgument);
  EXPECT_THROW(rendezvous(base, -1, 2), InvalidArgument);
  EXPECT_THROW(rendezvous(base, 2, 2), InvalidArgument);
}

TEST(RendezvousJoin, UnreachableStoreTimesOutNamingHostAndPort) {
  ScopedEnv env;
  const uint16_t port = free_port();  // nobody listens there
  const std::string where = "127.0.0.1:" + std::to_string(port);
  auto start = Clock::now();
  try {
    rendezvous("tcp://" + where + "?rank=1&world_size=2", -1, -1, milliseconds(1000));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
  auto took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(900));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(RendezvousJoin, UnreachableAgentStoreTimesOutForRankZeroToo) {
  ScopedEnv env;
  const uint16_t port = free_port();
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(port));
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("TDIST_USE_AGENT_STORE", "1");
  auto start = Clock::now();
  try {
    rendezvous("env://", -1, -1, milliseconds(1000));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("the launcher"), std::string::npos) << msg;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(RendezvousJoin, TakenPortOnRankZeroNamesThePort) {
  ScopedEnv env;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  try {
    rendezvous("tcp://127.0.0.1:" + port + "?rank=0&world_size=1", -1, -1, milliseconds(2000));
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("could not host the store on port " + port), std::string::npos) << msg;
  }
  ::close(fd);
}

TEST(RendezvousJoin, DefaultTimeoutComesFromTdistTimeout) {
  ScopedEnv env;
  EXPECT_EQ(default_pg_timeout(), milliseconds(1'800'000));
  env.set("TDIST_TIMEOUT", "2.5");
  EXPECT_EQ(default_pg_timeout(), milliseconds(2500));
}

}  // namespace
}  // namespace tdist
