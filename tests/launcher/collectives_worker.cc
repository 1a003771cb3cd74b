// launcher_collectives_worker: one rank of a multi-host job (multihost_auto_test.sh) that
// runs every collective over a backend and checks each result against a reference
// computed here, or that watches a rank on another host die.
//
//   launcher_collectives_worker check
//   launcher_collectives_worker kill VICTIM DIR
//
// Both join through env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) with the backend
// $TDIST_TEST_BACKEND (default auto) and a 30 s group timeout.
// check: all_reduce (sum and max, f32 and i32, 0 to 2^18+3 elements), broadcast, reduce,
// all_gather, reduce_scatter, gather, scatter and all_to_all from/to several roots and in
// several sizes, barrier (every rank's pre-barrier store key is there after it), and
// send/recv around the ring and between every pair. Inputs are small integers, so float
// sums are exact in any order and every result is compared exactly. Prints "rank R: N
// checks passed" and exits 0; exits 1 naming the first wrong result or the error.
// kill: after a barrier, rank VICTIM writes the time (CLOCK_REALTIME, ns) to DIR/killed_at
// and SIGKILLs itself; every other rank is then inside an all_reduce that needs it and
// must get PeerError within 5 s of that time: it prints "rank R: PeerError N ms after
// the kill: ..." and exits 0, or exits 1 (no error, another error, too late).
// Exit status 2: bad usage. A worker still running after 35 s dies of SIGALRM.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace {

using tdist::DType;
using tdist::ReduceOp;
using tdist::ReduceOpKind;

int g_rank = -1;
int g_world = 0;
int g_checks = 0;

// Small integers varied by (rank, element, salt): exact as f32 and summed over <= 64 ranks.
template <typename T>
T input(int rank, size_t i, int salt) {
  const uint64_t h = (i * 2654435761u + static_cast<uint64_t>(rank) * 40503u +
                      static_cast<uint64_t>(salt) * 977u) >>
                     4;
  return static_cast<T>(static_cast<int64_t>(h % 2001) - 1000);
}

template <typename T>
std::vector<T> inputs(int rank, size_t count, int salt, size_t first = 0) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = input<T>(rank, first + i, salt);
  return v;
}

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::kF32 : DType::kI32;
}

// Fails the run when got != want, naming the check and the first differing element.
template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  TDIST_CHECK(got.size() == want.size(), tdist::Error, what, ": ", got.size(),
              " elements, expected ", want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    TDIST_CHECK(got[i] == want[i], tdist::Error, what, ": element ", i, " is ", got[i],
                ", expected ", want[i]);
  }
  ++g_checks;
}

std::string name(const char* op, DType dtype, size_t count, int root = -1) {
  std::string s = std::string(op) + " " + std::string(tdist::dtype_name(dtype)) + " count " +
                  std::to_string(count);
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

constexpr size_t kLarge = (size_t{1} << 18) + 3;  // 1 MiB of f32: chunked, many rings long

template <typename T>
void check_all_reduce(tdist::ProcessGroup& pg) {
  for (ReduceOpKind op : {ReduceOpKind::kSum, ReduceOpKind::kMax}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, kLarge}) {
      const int salt = static_cast<int>(op) * 10 + static_cast<int>(count % 7);
      std::vector<T> want = inputs<T>(0, count, salt);
      for (int r = 1; r < g_world; ++r) {
        std::vector<T> in = inputs<T>(r, count, salt);
        for (size_t i = 0; i < count; ++i) {
          want[i] = op == ReduceOpKind::kSum ? want[i] + in[i] : std::max(want[i], in[i]);
        }
      }
      std::vector<T> data = inputs<T>(g_rank, count, salt);
      pg.all_reduce(data.data(), count, dtype_of<T>(), ReduceOp(op))->wait();
      expect_equal(data, want,
                   name(op == ReduceOpKind::kSum ? "all_reduce sum" : "all_reduce max",
                        dtype_of<T>(), count));
    }
  }
}

void check_broadcast(tdist::ProcessGroup& pg) {
  for (int root = 0; root < g_world; ++root) {
    for (size_t count : {size_t{1}, size_t{1000}, root == g_world - 1 ? kLarge : size_t{5}}) {
      std::vector<float> data =
          g_rank == root ? inputs<float>(root, count, 3) : std::vector<float>(count, -1.0f);
      pg.broadcast(data.data(), count, DType::kF32, root)->wait();
      expect_equal(data, inputs<float>(root, count, 3),
                   name("broadcast", DType::kF32, count, root));
    }
  }
}

void check_reduce(tdist::ProcessGroup& pg) {
  for (int root : {0, g_world - 1}) {
    for (size_t count : {size_t{3}, kLarge}) {
      std::vector<int32_t> want(count, 0);
      for (int r = 0; r < g_world; ++r) {
        std::vector<int32_t> in = inputs<int32_t>(r, count, 4);
        for (size_t i = 0; i < count; ++i) want[i] += in[i];
      }
      std::vector<int32_t> send = inputs<int32_t>(g_rank, count, 4);
      std::vector<int32_t> recv(g_rank == root ? count : 0, -7);
      pg.reduce(send.data(), g_rank == root ? recv.data() : nullptr, count, DType::kI32,
                ReduceOp(ReduceOpKind::kSum), root)
          ->wait();
      if (g_rank == root) expect_equal(recv, want, name("reduce sum", DType::kI32, count, root));
    }
  }
}

void check_all_gather(tdist::ProcessGroup& pg) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{65539}}) {
    std::vector<int32_t> want;
    for (int r = 0; r < g_world; ++r) {
      std::vector<int32_t> in = inputs<int32_t>(r, count, 5);
      want.insert(want.end(), in.begin(), in.end());
    }
    std::vector<int32_t> send = inputs<int32_t>(g_rank, count, 5);
    std::vector<int32_t> recv(count * g_world, -7);
    pg.all_gather(send.data(), recv.data(), count, DType::kI32)->wait();
    expect_equal(recv, want, name("all_gather", DType::kI32, count));
  }
}

void check_reduce_scatter(tdist::ProcessGroup& pg) {
  for (size_t count : {size_t{1}, size_t{999}, size_t{65539}}) {
    // Rank r's send: world blocks of count, block b = inputs from element b * count on.
    std::vector<float> want(count, 0.0f);
    for (int r = 0; r < g_world; ++r) {
      std::vector<float> block = inputs<float>(r, count, 6, static_cast<size_t>(g_rank) * count);
      for (size_t i = 0; i < count; ++i) want[i] += block[i];
    }
    std::vector<float> send = inputs<float>(g_rank, count * g_world, 6);
    std::vector<float> recv(count, -7.0f);
    pg.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp(ReduceOpKind::kSum))
        ->wait();
    expect_equal(recv, want, name("reduce_scatter sum", DType::kF32, count));
  }
}

void check_gather_scatter(tdist::ProcessGroup& pg) {
  for (int root : {0, g_world - 1}) {
    for (size_t count : {size_t{2}, size_t{65539}}) {
      std::vector<int32_t> send = inputs<int32_t>(g_rank, count, 7);
      std::vector<int32_t> recv(g_rank == root ? count * g_world : 0, -7);
      pg.gather(send.data(), g_rank == root ? recv.data() : nullptr, count, DType::kI32, root)
          ->wait();
      if (g_rank == root) {
        std::vector<int32_t> want;
        for (int r = 0; r < g_world; ++r) {
          std::vector<int32_t> in = inputs<int32_t>(r, count, 7);
          want.insert(want.end(), in.begin(), in.end());
        }
        expect_equal(recv, want, name("gather", DType::kI32, count, root));
      }
      // Root's send holds world blocks; rank r gets block r.
      std::vector<float> all =
          g_rank == root ? inputs<float>(root, count * g_world, 8) : std::vector<float>();
      std::vector<float> mine(count, -7.0f);
      pg.scatter(g_rank == root ? all.data() : nullptr, mine.data(), count, DType::kF32, root)
          ->wait();
      expect_equal(mine, inputs<float>(root, count, 8, static_cast<size_t>(g_rank) * count),
                   name("scatter", DType::kF32, count, root));
    }
  }
}

void check_all_to_all(tdist::ProcessGroup& pg) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{65539}}) {
    // Block p of rank r's send = inputs of (r, salt 9) from element p * count on; block p
    // of the receive comes from rank p: its block for this rank.
    std::vector<int32_t> send = inputs<int32_t>(g_rank, count * g_world, 9);
    std::vector<int32_t> recv(count * g_world, -7);
    pg.all_to_all(send.data(), recv.data(), count, DType::kI32)->wait();
    std::vector<int32_t> want;
    for (int p = 0; p < g_world; ++p) {
      std::vector<int32_t> block =
          inputs<int32_t>(p, count, 9, static_cast<size_t>(g_rank) * count);
      want.insert(want.end(), block.begin(), block.end());
    }
    expect_equal(recv, want, name("all_to_all", DType::kI32, count));
  }
}

// Ranks arrive at different times; after each barrier every rank's key set before it is
// in the store.
void check_barrier(tdist::ProcessGroup& pg) {
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(((g_rank + round) % g_world) * 20));
    const std::string prefix = "collectives_worker/barrier" + std::to_string(round) + "/";
    pg.store()->set(prefix + std::to_string(g_rank), "here");
    pg.barrier()->wait();
    std::vector<std::string> keys;
    for (int r = 0; r < g_world; ++r) keys.push_back(prefix + std::to_string(r));
    TDIST_CHECK(pg.store()->check(keys), tdist::Error, "barrier round ", round,
                ": some rank's key set before the barrier is missing after it");
    ++g_checks;
  }
}

// Around the ring (everyone at once), then between every pair, small and large.
void check_send_recv(tdist::ProcessGroup& pg) {
  for (size_t count : {size_t{1}, kLarge}) {
    const int next = (g_rank + 1) % g_world;
    const int prev = (g_rank + g_world - 1) % g_world;
    std::vector<float> out = inputs<float>(g_rank, count, 10);
    std::vector<float> in(count, -7.0f);
    auto r = pg.irecv(in.data(), count, DType::kF32, prev, 3);
    auto s = pg.isend(out.data(), count, DType::kF32, next, 3);
    s->wait();
    r->wait();
    expect_equal(in, inputs<float>(prev, count, 10), name("send/recv ring", DType::kF32, count));
  }
  for (int a = 0; a < g_world; ++a) {
    for (int b = a + 1; b < g_world; ++b) {
      if (g_rank != a && g_rank != b) continue;
      const int peer = g_rank == a ? b : a;
      const size_t count = (a + b) % 2 == 0 ? 17 : kLarge;
      std::vector<int32_t> out = inputs<int32_t>(g_rank, count, 11 + peer);
      std::vector<int32_t> in(count, -7);
      if (g_rank == a) {
        pg.send(out.data(), count, DType::kI32, peer, 4);
        pg.recv(in.data(), count, DType::kI32, peer, 4);
      } else {
        pg.recv(in.data(), count, DType::kI32, peer, 4);
        pg.send(out.data(), count, DType::kI32, peer, 4);
      }
      expect_equal(in, inputs<int32_t>(peer, count, 11 + g_rank),
                   "send/recv " + std::to_string(a) + "<->" + std::to_string(b));
    }
  }
}

void join() {
  const char* backend = std::getenv("TDIST_TEST_BACKEND");
  tdist::init_process_group(backend != nullptr && *backend != '\0' ? backend : "auto", "env://", -1,
                            -1, std::chrono::seconds(30));
  g_rank = tdist::get_rank();
  g_world = tdist::get_world_size();
}

int run_checks() {
  join();
  auto pg = tdist::get_default_group();
  check_all_reduce<float>(*pg);
  check_all_reduce<int32_t>(*pg);
  check_broadcast(*pg);
  check_reduce(*pg);
  check_all_gather(*pg);
  check_reduce_scatter(*pg);
  check_gather_scatter(*pg);
  check_all_to_all(*pg);
  check_barrier(*pg);
  check_send_recv(*pg);
  pg->barrier()->wait();
  std::printf("rank %d: %d checks passed (backend %s, world %d)\n", g_rank, g_checks,
              pg->backend_name().c_str(), g_world);
  std::fflush(stdout);
  tdist::destroy_process_group();
  return 0;
}

int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int run_kill(int victim, const std::string& dir) {
  join();
  auto pg = tdist::get_default_group();
  TDIST_CHECK(victim > 0 && victim < g_world, tdist::InvalidArgument, "victim ", victim,
              " must be a rank other than 0 (which holds the store) of ", g_world);
  std::vector<float> data(kLarge, 1.0f);
  pg->all_reduce(data.data(), data.size(), DType::kF32)->wait();  // every link in use once
  pg->barrier()->wait();
  const std::string stamp = dir + "/killed_at";
  if (g_rank == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    { std::ofstream(stamp + ".tmp") << realtime_ns() << "\n"; }
    std::rename((stamp + ".tmp").c_str(), stamp.c_str());
    ::raise(SIGKILL);
  }
  try {
    pg->all_reduce(data.data(), data.size(), DType::kF32)->wait();
  } catch (const tdist::PeerError& e) {
    const int64_t now = realtime_ns();
    int64_t killed = 0;
    std::ifstream(stamp) >> killed;
    TDIST_CHECK(killed > 0, tdist::Error, "PeerError before the victim wrote ", stamp, ": ",
                e.what());
    const int64_t ms = (now - killed) / 1'000'000;
    std::printf("rank %d: PeerError %lld ms after the kill: %s\n", g_rank,
                static_cast<long long>(ms), e.what());
    std::fflush(stdout);
    TDIST_CHECK(ms < 5000, tdist::Error, "PeerError came ", ms, " ms after the kill (limit 5000)");
    return 0;
  }
  std::fprintf(stderr, "rank %d: the all_reduce without rank %d completed\n", g_rank, victim);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ::alarm(35);
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (!((mode == "check" && argc == 2) || (mode == "kill" && argc == 4))) {
    std::fprintf(stderr, "usage: %s check | kill VICTIM DIR\n", argv[0]);
    return 2;
  }
  const char* rank = std::getenv("RANK");
  try {
    if (mode == "check") return run_checks();
    const int code = run_kill(std::atoi(argv[2]), argv[3]);
    std::fflush(nullptr);
    ::_exit(code);  // the group is aborted: no teardown
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_worker rank %s: %s\n", rank != nullptr ? rank : "?",
                 e.what());
    std::fflush(stderr);
    ::_exit(1);  // an aborted group may not be torn down cleanly
  }
}
