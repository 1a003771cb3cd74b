// TCP transport with real processes over a TCPStore: a rank killed with SIGKILL turns
// every other rank's pending receive into PeerError within seconds; and a throughput and
// latency report between two processes (printed, not asserted).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "tcp_test_util.h"
#include "tdist/error.h"
#include "tdist/tcp_store.h"

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

// A TCPStore server in its own process (so this process forks its ranks with no threads
// of its own running, as ThreadSanitizer requires). Killed when the object goes away.
class StoreProcess {
 public:
  StoreProcess() {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork_child([&] {
      ::close(fds[0]);
      auto server = TCPStoreServer::start("127.0.0.1", 0);
      uint16_t p = server->port();
      if (::write(fds[1], &p, sizeof(p)) != sizeof(p)) return 5;
      ::pause();  // until killed
      return 0;
    });
    ::close(fds[1]);
    if (::read(fds[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = 0;
    ::close(fds[0]);
  }
  ~StoreProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

std::unique_ptr<Comm> connect_over_tcp_store(uint16_t port, int rank, int world) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 20s;
  o.connect_timeout = 20s;
  auto store = std::make_shared<TCPStore>("127.0.0.1", o);
  return connect_tcp_comm(store, rank, world, test_options());
}

TEST(TcpCommProcessTest, SigkilledRankMakesEveryOtherRankFailFast) {
  constexpr int kWorld = 4;
  StoreProcess store;
  const uint16_t port = store.port();
  ASSERT_NE(port, 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    pids.push_back(fork_child([=] {
      auto comm = connect_over_tcp_store(port, rank, kWorld);
      if (rank == kWorld - 1) {
        std::this_thread::sleep_for(300ms);
        ::raise(SIGKILL);
      }
      uint64_t x = 0;
      auto req = comm->irecv((rank + 1) % (kWorld - 1), p2p_tag(1), &x, sizeof(x));
      const auto start = Clock::now();
      try {
        req->wait(Deadline::after(20s));
      } catch (const PeerError& e) {
        auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
        std::fprintf(stderr, "rank %d: PeerError after %lld ms: %s\n", rank,
                     static_cast<long long>(ms), e.what());
        return Clock::now() - start < 5s ? 0 : 2;
      }
      return 3;
    }));
  }
  std::vector<int> codes = wait_children(pids);
  for (int rank = 0; rank < kWorld - 1; ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
  EXPECT_EQ(codes[kWorld - 1], -SIGKILL);
}

// Two processes: 8-byte ping-pong latency and 64 MiB both-direction bandwidth.
TEST(TcpCommProcessTest, ThroughputAndLatencyReport) {
  StoreProcess store;
  const uint16_t port = store.port();
  ASSERT_NE(port, 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(fork_child([=] {
      auto comm = connect_over_tcp_store(port, rank, 2);
      const int peer = 1 - rank;
      uint64_t ping = 0;
      constexpr int kRounds = 20000;
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
      pingpong(1000);
      auto start = Clock::now();
      pingpong(kRounds);
      double rtt_us =
          std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kRounds;
      constexpr size_t kBytes = size_t{64} << 20;
      constexpr int kIters = 10;
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
