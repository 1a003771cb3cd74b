// Two-process benchmark of the shared-memory transport (not a test): 8-byte ping-pong
// round trip and bandwidth of large messages exchanged in both directions at once, as
// tcp_comm_bench measures the TCP transport.
//   shm_comm_bench [pingpong_rounds=20000] [mib=64] [iters=10] [ring_bytes=setting]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/file_store.h"
#include "tdist/settings.h"
#include "transport/shm/shm_comm.h"

namespace {

using namespace std::chrono_literals;
using tdist::Clock;
using tdist::Deadline;

// User + system CPU time of this process so far.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int run_rank(const std::string& store_path, int rank, int rounds, size_t bytes, int iters,
             size_t ring_bytes) {
  auto store = std::make_shared<tdist::FileStore>(store_path);
  tdist::transport::ShmCommOptions options;
  options.ring_bytes = ring_bytes;
  auto comm = tdist::transport::connect_shm_comm(store, rank, 2, options);
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
  const double cpu_start = cpu_seconds();
  start = Clock::now();
  for (int i = 0; i < iters; ++i) exchange();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_ms = (cpu_seconds() - cpu_start) * 1000 / iters;
  if (rank == 0) {
    std::printf("tdist-shm ring %zu KiB 8B rtt_us=%.1f\n", ring_bytes >> 10, rtt);
    std::printf(
        "tdist-shm ring %zu KiB %zuMiB bidir GB/s per dir=%.2f (%.2f ms, %.2f ms CPU of rank 0 "
        "per exchange)\n",
        ring_bytes >> 10, bytes >> 20, iters * static_cast<double>(bytes) / secs / 1e9,
        secs * 1000 / iters, cpu_ms);
  }
  return in[0] == static_cast<uint8_t>(peer) ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  size_t bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64) << 20;
  int iters = argc > 3 ? std::atoi(argv[3]) : 10;
  size_t ring_bytes = argc > 4 ? std::strtoull(argv[4], nullptr, 10)
                               : static_cast<size_t>(tdist::setting_int("TDIST_SHM_RING_BYTES"));
  char dir[] = "/tmp/tdist_shm_bench_XXXXXX";
  if (::mkdtemp(dir) == nullptr) return 2;
  const std::string store_path = std::string(dir) + "/store";
  std::fflush(nullptr);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = ::fork();
    if (pids[rank] == 0) {
      int code = 99;
      try {
        code = run_rank(store_path, rank, rounds, bytes, iters, ring_bytes);
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
  std::remove(store_path.c_str());
  ::rmdir(dir);
  return failed;
}
