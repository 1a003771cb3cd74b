// Two-process benchmark of the TCP transport (not a test): 8-byte ping-pong round trip
// and bandwidth of large messages exchanged in both directions at once.
//   tcp_comm_bench [pingpong_rounds=20000] [mib=64] [iters=10]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tdist/error.h"
#include "tdist/tcp_store.h"
#include "transport/tcp/tcp_comm.h"

namespace {

using namespace std::chrono_literals;
using tdist::Clock;
using tdist::Deadline;

int run_rank(uint16_t port, int rank, int rounds, size_t bytes, int iters) {
  tdist::TCPStoreOptions o;
  o.port = port;
  auto store = std::make_shared<tdist::TCPStore>("127.0.0.1", o);
  auto comm = tdist::transport::connect_tcp_comm(store, rank, 2);
  const int peer = 1 - rank;
  uint64_t ping = 0;
  auto pingpong = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (rank == 0) {
        comm->isend(peer, 1, &ping, 8)->wait(Deadline::after(20s));
        comm->irecv(peer, 1, &ping, 8)->wait(Deadline::after(20s));
      } else {
        comm->irecv(peer, 1, &ping, 8)->wait(Deadline::after(20s));
        comm->isend(peer, 1, &ping, 8)->wait(Deadline::after(20s));
      }
    }
  };
  pingpong(rounds / 10 + 1);
  auto start = Clock::now();
  pingpong(rounds);
  double rtt = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / rounds;
  std::vector<uint8_t> out(bytes, static_cast<uint8_t>(rank));
  std::vector<uint8_t> in(bytes);
  auto exchange = [&] {
    auto r = comm->irecv(peer, 2, in.data(), bytes);
    auto s = comm->isend(peer, 2, out.data(), bytes);
    s->wait(Deadline::after(60s));
    r->wait(Deadline::after(60s));
  };
  exchange();
  start = Clock::now();
  for (int i = 0; i < iters; ++i) exchange();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (rank == 0) {
    std::printf("tdist-tcp 8B rtt_us=%.1f\n", rtt);
    std::printf("tdist-tcp %zuMiB bidir GB/s per dir=%.2f\n", bytes >> 20,
                iters * static_cast<double>(bytes) / secs / 1e9);
  }
  return in[0] == static_cast<uint8_t>(peer) ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  size_t bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64) << 20;
  int iters = argc > 3 ? std::atoi(argv[3]) : 10;
  auto server = tdist::TCPStoreServer::start("127.0.0.1", 0);
  uint16_t port = server->port();
  std::fflush(nullptr);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = ::fork();
    if (pids[rank] == 0) {
      int code = 99;
      try {
        code = run_rank(port, rank, rounds, bytes, iters);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
