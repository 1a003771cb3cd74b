// launcher_init_barrier_worker: the smallest complete job, timed by the launcher startup
// benchmark (scripts/bench_launcher.sh): init_process_group("tcp") over env://, one
// barrier, destroy_process_group.
//
//   launcher_init_barrier_worker [--print]
//
// Silent unless --print, with which rank 0 reports the world size and its own time from
// process start to the barrier's end. Exit status: 0 on success, 1 with a message on
// stderr on any failure, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "tdist/distributed.h"
#include "tdist/error.h"

int main(int argc, char** argv) {
  auto start = std::chrono::steady_clock::now();
  bool print = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--print") == 0) {
      print = true;
    } else {
      std::fprintf(stderr, "usage: %s [--print]\n", argv[0]);
      return 2;
    }
  }
  try {
    tdist::init_process_group("tcp", "env://");
    tdist::get_default_group()->barrier()->wait();
    int rank = tdist::get_rank();
    int world = tdist::get_world_size();
    tdist::destroy_process_group();
    if (print && rank == 0) {
      std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      std::printf("init_barrier: %d ranks joined and passed a barrier (rank 0: %.1f ms)\n", world,
                  took.count());
    }
  } catch (const tdist::Error& e) {
    std::fprintf(stderr, "init_barrier_worker: %s\n", e.what());
    return 1;
  }
  return 0;
}
