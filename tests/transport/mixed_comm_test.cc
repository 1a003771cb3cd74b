// The mixed Comm: ranks as threads of one process, given fake host keys, so that peers on
// the same "host" get shared-memory channels and the others TCP, all driven by one engine.
// (The conformance suite runs every Comm case over it too: comm_factories.h, "mixed".)
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "shm_test_util.h"
#include "tcp_test_util.h"
#include "tdist/error.h"
#include "transport/connect.h"
#include "transport/core/engine.h"
#include "core/polling.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

// Ranks with the same letter in `hosts` share a fake host ("AAB": ranks 0, 1 on A, 2 on B).
// `key_prefix` goes before each host key: "boot-1:" makes every host a network namespace of
// one machine (topology.h: a machine is the key's text before its first ':').
ConnectFn mixed(const std::string& hosts, size_t ring_bytes = kSmallRing,
                std::string key_prefix = "") {
  return [hosts, ring_bytes, key_prefix](std::shared_ptr<Store> store, int rank, int world) {
    ChannelKinds kinds;
    kinds.push_back(make_shm_kind(shm_options(ring_bytes)));
    kinds.push_back(make_tcp_kind(test_options()));
    ConnectOptions options;
    options.timeout = kSetupTimeout;
    options.host_key = key_prefix + "fake-host-" + hosts.at(static_cast<size_t>(rank));
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

// Each rank pinned to its own CPU (as mpirun binds them) before it connects.
ConnectFn pinned(ConnectFn connect, const std::vector<int>& cpus) {
  return [connect, cpus](std::shared_ptr<Store> store, int rank, int world) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(rank) % cpus.size()], &one);
    EXPECT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);  // this thread only
    return connect(std::move(store), rank, world);
  };
}

std::vector<int> usable_cpus() {
  cpu_set_t mask;
  EXPECT_EQ(::sched_getaffinity(0, sizeof(mask), &mask), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  return cpus;
}

// A machine's ranks together may run on as many CPUs as they are pinned to (polling.h
// counts that, not the one CPU of each rank's own mask).
TEST(MixedCommTest, TheTopologyCountsTheCpusOfEachMachinesRanksTogether) {
  const std::vector<int> cpus = usable_cpus();
  const int n = static_cast<int>(cpus.size());
  run_comm_ranks(3, pinned(mixed("AAB"), cpus), [&](Comm& comm) {
    EXPECT_EQ(comm.topology().machine_of, (std::vector<int>{0, 0, 1})) << comm.rank();
    EXPECT_EQ(comm.topology().machine_cpus, (std::vector<int>{std::min(n, 2), 1})) << comm.rank();
  });
  EXPECT_EQ(tdist::core::union_cpu_count({tdist::core::affinity_list()}), n);
}

// Hosts that are network namespaces of one machine (one boot id) are two hosts for the
// channels and the algorithms, but one machine for the CPUs: its ranks compete for them.
TEST(MixedCommTest, NamespacesOfOneMachineShareItsCpus) {
  const std::vector<int> cpus = usable_cpus();
  const int n = static_cast<int>(cpus.size());
  run_comm_ranks(3, pinned(mixed("AAB", kSmallRing, "boot-1:"), cpus), [&](Comm& comm) {
    const int r = comm.rank();
    EXPECT_STREQ(kind_to(comm, r == 2 ? 0 : 2), "tcp") << r;
    EXPECT_EQ(comm.topology().host_of, (std::vector<int>{0, 0, 1})) << r;
    EXPECT_EQ(comm.topology().machine_of, (std::vector<int>{0, 0, 0})) << r;
    EXPECT_EQ(comm.topology().machine_cpus, (std::vector<int>{std::min(n, 3)})) << r;
  });
}

TEST(Topology, AMachineIsTheBootIdBeforeTheFirstColon) {
  const Topology t = Topology::from_host_keys(
      {"b1:4026531840:h", "b1:4026532001:h", "b2:4026531840:g", "b1:4026531840:h", "plain"});
  EXPECT_EQ(t.host_of, (std::vector<int>{0, 1, 2, 0, 3}));
  EXPECT_EQ(t.machine_of, (std::vector<int>{0, 0, 1, 0, 2}));
  EXPECT_EQ(t.num_machines(), 3);
  EXPECT_EQ(t.ranks_on_machine(0), (std::vector<int>{0, 1, 3}));
}

TEST(MixedCommTest, TheLinkClassIsTheSlowestPairsOnEveryRank) {
  run_comm_ranks(3, mixed("AAA"), [](Comm& comm) {
    EXPECT_EQ(comm.topology().link, LinkClass::kShm) << comm.rank();
  });
  // Rank 0 reaches rank 1 by shared memory, but rank 2 only over TCP: tcp on all.
  run_comm_ranks(3, mixed("AAB"), [](Comm& comm) {
    EXPECT_EQ(comm.topology().link, LinkClass::kTcp) << comm.rank();
  });
  // One host, TCP channels only (TDIST_CHANNELS=tcp, the tcp backend).
  run_ranks(2, [](Comm& comm) {
    EXPECT_STREQ(kind_to(comm, 1 - comm.rank()), "tcp");
    EXPECT_EQ(comm.topology().link, LinkClass::kTcp);
  });
  EXPECT_STREQ(link_class_name(LinkClass::kShm), "shm");
  EXPECT_STREQ(link_class_name(LinkClass::kUnknown), "unknown");
}

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
