// The mixed Comm: ranks as threads of one process, given fake host keys, so that peers on
// the same "host" get shared-memory channels and the others TCP, all driven by one engine.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "shm_test_util.h"
#include "tcp_test_util.h"
#include "tdist/error.h"
#include "transport/connect.h"
#include "transport/core/engine.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

// Ranks with the same letter in `hosts` share a fake host ("AAB": ranks 0, 1 on A, 2 on B).
ConnectFn mixed(const std::string& hosts, size_t ring_bytes = kSmallRing) {
  return [hosts, ring_bytes](std::shared_ptr<Store> store, int rank, int world) {
    ChannelKinds kinds;
    kinds.push_back(make_shm_kind(shm_options(ring_bytes)));
    kinds.push_back(make_tcp_kind(test_options()));
    ConnectOptions options;
    options.timeout = kSetupTimeout;
    options.host_key = std::string("fake-host-") + hosts.at(static_cast<size_t>(rank));
    return connect_comm(std::move(store), rank, world, std::move(kinds), options);
  };
}

const char* kind_to(Comm& comm, int peer) {
  return dynamic_cast<core::Engine&>(comm).channel_kind(peer);
}

TEST(MixedCommTest, EachPeerGetsTheBestChannelAndTheTopology) {
  run_comm_ranks(4, mixed("AABB"), [](Comm& comm) {
    const int r = comm.rank();
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      EXPECT_STREQ(kind_to(comm, p), (p / 2 == r / 2) ? "shm" : "tcp") << r << " -> " << p;
    }
    EXPECT_EQ(comm.topology().host_of, (std::vector<int>{0, 0, 1, 1}));
  });
}

TEST(MixedCommTest, EveryPairExchangesSmallAndStreamedMessages) {
  run_comm_ranks(3, mixed("AAB"), [](Comm& comm) {
    const int r = comm.rank();
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20}) {
      std::vector<std::vector<uint8_t>> got(3, std::vector<uint8_t>(bytes));
      std::vector<std::vector<uint8_t>> sent(3);
      std::vector<RequestPtr> reqs;
      for (int p = 0; p < 3; ++p) {
        if (p == r) continue;
        reqs.push_back(comm.irecv(p, 7, got[p].data(), bytes));
        sent[p] = pattern(static_cast<uint64_t>(r * 10 + p), bytes);
        reqs.push_back(comm.isend(p, 7, sent[p].data(), bytes));
      }
      for (auto& q : reqs) q->wait(Deadline::after(20s));
      for (int p = 0; p < 3; ++p) {
        if (p != r) {
          EXPECT_EQ(got[p], pattern(static_cast<uint64_t>(p * 10 + r), bytes));
        }
      }
    }
  });
}

// The case that deadlocked when each transport had its own engine: rank 0's shared-memory
// send to rank 1 (larger than the ring) can only finish while rank 0 moves it, but rank 0
// waits on a TCP receive from rank 2, which rank 2 sends only after rank 1 got the message.
TEST(MixedCommTest, ARankWaitingOnTcpStillMovesItsSharedMemorySends) {
  constexpr size_t kBig = 4 << 20;  // 64x the ring
  run_comm_ranks(3, mixed("AAB"), [](Comm& comm) {
    const Deadline deadline = Deadline::after(20s);
    uint32_t token = 0;
    if (comm.rank() == 0) {
      std::vector<uint8_t> big = pattern(1, kBig);
      auto send = comm.isend(1, 1, big.data(), big.size());
      comm.irecv(2, 2, &token, sizeof(token))->wait(deadline);
      EXPECT_EQ(token, 42u);
      send->wait(deadline);
    } else if (comm.rank() == 1) {
      std::vector<uint8_t> big(kBig);
      comm.irecv(0, 1, big.data(), big.size())->wait(deadline);
      EXPECT_EQ(big, pattern(1, kBig));
      token = 41;
      comm.isend(2, 3, &token, sizeof(token))->wait(deadline);
    } else {
      comm.irecv(1, 3, &token, sizeof(token))->wait(deadline);
      token += 1;
      comm.isend(0, 2, &token, sizeof(token))->wait(deadline);
    }
  });
}

TEST(MixedCommTest, AbortReachesPeersOfBothKinds) {
  run_comm_ranks(3, mixed("AAB"), [](Comm& comm) {
    uint64_t x = 0;
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(50ms);
      comm.abort(std::make_exception_ptr(PeerError("rank 0: gave up")));
      return;
    }
    const std::string what =
        error_of<PeerError>([&] { comm.irecv(0, 9, &x, sizeof(x))->wait(Deadline::after(10s)); });
    EXPECT_NE(what.find("rank 0: gave up"), std::string::npos) << what;
  });
}

TEST(MixedCommTest, ChannelSettingChoosesAndRefusesKinds) {
  ::setenv("TDIST_CHANNELS", "tcp", 1);
  ChannelKinds only_tcp = default_channel_kinds();
  ASSERT_EQ(only_tcp.size(), 1u);
  EXPECT_STREQ(only_tcp[0]->name(), "tcp");
  ::setenv("TDIST_CHANNELS", "shm,rdma", 1);
  const std::string what = error_of<InvalidArgument>([] { default_channel_kinds(); });
  EXPECT_NE(what.find("'rdma'"), std::string::npos) << what;
  EXPECT_NE(what.find("shm, tcp"), std::string::npos) << what;
  ::unsetenv("TDIST_CHANNELS");
  EXPECT_EQ(default_channel_kinds().size(), 2u);
}

TEST(MixedCommTest, APeerNoAllowedKindReachesIsNamed) {
  const std::string what = error_of<InvalidArgument>([] {
    run_comm_ranks(
        2,
        [](std::shared_ptr<Store> store, int rank, int world) {
          ChannelKinds kinds;
          kinds.push_back(make_shm_kind(shm_options()));
          ConnectOptions options;
          options.timeout = kSetupTimeout;
          options.host_key = rank == 0 ? "fake-host-A" : "fake-host-B";
          return connect_comm(std::move(store), rank, world, std::move(kinds), options);
        },
        [](Comm&) {});
  });
  EXPECT_NE(what.find("no allowed kind of channel (shm) can reach rank"), std::string::npos)
      << what;
}

}  // namespace
}  // namespace tdist::transport::testing
