// Shared-memory transport with real processes (forked before any thread exists) over a
// FileStore: rings passed as memfds between processes carry data both ways; a rank killed
// with SIGKILL, even in the middle of streaming a message, turns every other rank's
// pending receive into PeerError within 5 s; and nothing is left in /dev/shm.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "shm_test_util.h"
#include "tdist/error.h"
#include "tdist/file_store.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

// Runs body() in a child process; its return value is the exit code (99 on exception).
pid_t fork_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::alarm(50);
  int code = 99;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  std::fflush(nullptr);
  ::_exit(code);
}

// Waits for every child; returns their exit codes (-signal when killed by a signal).
std::vector<int> wait_children(const std::vector<pid_t>& pids) {
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  return codes;
}

// A fresh FileStore path, removed with the object.
class StorePath {
 public:
  StorePath() {
    char dir[] = "/tmp/tdist_shm_test_XXXXXX";
    if (::mkdtemp(dir) != nullptr) dir_ = dir;
  }
  ~StorePath() {
    std::remove(path().c_str());
    ::rmdir(dir_.c_str());
  }
  std::string path() const { return dir_ + "/store"; }

 private:
  std::string dir_;
};

std::unique_ptr<Comm> connect_over_file_store(const std::string& path, int rank, int world) {
  return connect_shm_comm(std::make_shared<FileStore>(path), rank, world, shm_options());
}

int dev_shm_entries_named_tdist() {
  int count = 0;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) count += std::string(e->d_name).find("tdist") == 0;
    ::closedir(dir);
  }
  return count;
}

TEST(ShmCommProcessTest, TwoProcessesExchangeBothWays) {
  StorePath store;
  constexpr size_t kBig = 7 * kSmallRing + 13;
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
        s->wait(Deadline::after(20s));
        r->wait(Deadline::after(20s));
        if (in != pattern(round * 2 + peer, bytes)) return 4;
      }
      return 0;
    }));
  }
  EXPECT_EQ(wait_children(pids), (std::vector<int>{0, 0}));
}

TEST(ShmCommProcessTest, SigkilledRankMakesEveryOtherRankFailFast) {
  constexpr int kWorld = 4;
  constexpr size_t kBig = 20 * kSmallRing;
  StorePath store;
  const int shm_before = dev_shm_entries_named_tdist();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    pids.push_back(fork_child([&, rank] {
      auto comm = connect_over_file_store(store.path(), rank, kWorld);
      std::vector<uint8_t> big(kBig, 1);
      if (rank == kWorld - 1) {
        // Starts a message far larger than the ring, then dies with it half sent.
        auto s = comm->isend(0, p2p_tag(2), big.data(), kBig);
        std::this_thread::sleep_for(300ms);
        ::raise(SIGKILL);
      }
      // Rank 0 waits in the middle of that message; ranks 1 and 2 wait on each other.
      RequestPtr req = rank == 0 ? comm->irecv(kWorld - 1, p2p_tag(2), big.data(), kBig)
                                 : comm->irecv(3 - rank, p2p_tag(1), big.data(), 8);
      const auto start = Clock::now();
      try {
        req->wait(Deadline::after(20s));
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

}  // namespace
}  // namespace tdist::transport::testing
