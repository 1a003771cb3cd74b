// Comm conformance with real processes: every transport of comm_factories.h, ranks
// forked (before any thread exists) and meeting over a FileStore. Two processes exchange
// both ways; a rank killed with SIGKILL in the middle of streaming a large message turns
// every other rank's pending receive into PeerError naming it within 5 s, and nothing is
// left in /dev/shm.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "tdist/error.h"
#include "tdist/file_store.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

class CommProcessTest : public CommTest {
 protected:
  std::unique_ptr<Comm> connect_over_file_store(const std::string& path, int rank,
                                                int world) const {
    return connect(std::make_shared<FileStore>(path), rank, world);
  }
};

int dev_shm_entries_named_tdist() {
  int count = 0;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) count += std::string(e->d_name).find("tdist") == 0;
    ::closedir(dir);
  }
  return count;
}

TEST_P(CommProcessTest, TwoProcessesExchangeBothWays) {
  StorePath store;
  constexpr size_t kBig = 7 * kTestRingBytes + 13;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(fork_child([&, rank] {
      auto comm = connect_over_file_store(store.path(), rank, 2);
      const int peer = 1 - rank;
      for (int round = 0; round < 200; ++round) {
        const size_t bytes = round % 50 == 0 ? kBig : static_cast<size_t>(round);
        const auto out = pattern(round * 2 + rank, bytes);
        std::vector<uint8_t> in(bytes);
        auto r = comm->irecv(peer, p2p_tag(round % 3), in.data(), bytes);
        auto s = comm->isend(peer, p2p_tag(round % 3), out.data(), bytes);
        s->wait(op_deadline());
        r->wait(op_deadline());
        if (in != pattern(round * 2 + peer, bytes)) return 4;
      }
      return 0;
    }));
  }
  EXPECT_EQ(wait_children(pids), (std::vector<int>{0, 0}));
}

TEST_P(CommProcessTest, SigkilledRankMakesEveryOtherRankFailFast) {
  constexpr int kWorld = 4;
  constexpr size_t kBig = size_t{32} << 20;
  StorePath store;
  const int shm_before = dev_shm_entries_named_tdist();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    pids.push_back(fork_child([&, rank] {
      auto comm = connect_over_file_store(store.path(), rank, kWorld);
      // Every pair talks first: lazy connections (tcp_lazy) then join every pair, as a full
      // mesh does from the start (a rank learns of a death over a connection).
      std::vector<RequestPtr> hello;
      uint8_t out = 1;
      std::vector<uint8_t> in(kWorld);
      for (int peer = 0; peer < kWorld; ++peer) {
        if (peer == rank) continue;
        hello.push_back(comm->irecv(peer, p2p_tag(9), &in[peer], 1));
        hello.push_back(comm->isend(peer, p2p_tag(9), &out, 1));
      }
      for (auto& req : hello) req->wait(op_deadline());
      std::vector<uint8_t> big(kBig, 1);
      if (rank == kWorld - 1) {
        // Starts a message far larger than any buffer, then dies with it half sent.
        auto s = comm->isend(0, p2p_tag(2), big.data(), kBig);
        std::this_thread::sleep_for(300ms);
        ::raise(SIGKILL);
      }
      // Rank 0 waits in the middle of that message (unless a background thread took all
      // of it in already), then on one that never comes; ranks 1 and 2 wait on each other.
      uint64_t x = 0;
      std::vector<RequestPtr> reqs;
      if (rank == 0) {
        reqs.push_back(comm->irecv(kWorld - 1, p2p_tag(2), big.data(), kBig));
        reqs.push_back(comm->irecv(kWorld - 1, p2p_tag(3), &x, sizeof(x)));
      } else {
        reqs.push_back(comm->irecv(3 - rank, p2p_tag(1), &x, sizeof(x)));
      }
      const auto start = Clock::now();
      try {
        for (auto& req : reqs) req->wait(Deadline::after(20s));
      } catch (const PeerError& e) {
        auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
        std::fprintf(stderr, "rank %d: PeerError after %lld ms: %s\n", rank,
                     static_cast<long long>(ms), e.what());
        if (std::string(e.what()).find("rank 3") == std::string::npos) return 5;
        return Clock::now() - start < 5s ? 0 : 2;
      }
      return 3;
    }));
  }
  std::vector<int> codes = wait_children(pids);
  for (int rank = 0; rank < kWorld - 1; ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
  EXPECT_EQ(codes[kWorld - 1], -SIGKILL);
  EXPECT_EQ(dev_shm_entries_named_tdist(), shm_before);
}

TDIST_FOR_EVERY_COMM_FACTORY(CommProcessTest);

}  // namespace
}  // namespace tdist::transport::testing
