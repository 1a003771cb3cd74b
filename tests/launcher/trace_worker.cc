// launcher_trace_worker: a small job for the timeline test (tdistrun_trace_test.cc):
// init_process_group("tcp") over env://, three all_reduces of 256 floats, a barrier,
// destroy_process_group (which writes the rank's timeline, TDIST_TRACE being set).
//
//   launcher_trace_worker [FAILING_RANK EXIT_CODE]
//
// With FAILING_RANK, that rank then waits (up to 5 s) until every other rank's timeline
// file is in $TDIST_TRACE, and exits with EXIT_CODE: tdistrun then stops the others, whose
// events must be in their files already. Exit status: 0 (EXIT_CODE for the failing rank),
// 1 with a message on stderr on any failure, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace {

// Whether $TDIST_TRACE/tdist_trace_rank<r>.json exists for every rank but `me`, within 5 s.
bool others_wrote(int me, int world) {
  const char* dir = std::getenv("TDIST_TRACE");
  if (dir == nullptr) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    const std::string file = std::string(dir) + "/tdist_trace_rank" + std::to_string(r) + ".json";
    while (!std::filesystem::exists(file)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 1 && argc != 3) {
    std::fprintf(stderr, "usage: %s [FAILING_RANK EXIT_CODE]\n", argv[0]);
    return 2;
  }
  const int failing = argc == 3 ? std::atoi(argv[1]) : -1;
  const int code = argc == 3 ? std::atoi(argv[2]) : 0;
  int rank = 0;
  int world = 1;
  try {
    tdist::init_process_group("tcp", "env://");
    rank = tdist::get_rank();
    world = tdist::get_world_size();
    auto group = tdist::get_default_group();
    std::vector<float> x(256, 1.0f);
    for (int i = 0; i < 3; ++i) group->all_reduce(x.data(), x.size(), tdist::DType::kF32)->wait();
    group->barrier()->wait();
    group.reset();
    tdist::destroy_process_group();
  } catch (const tdist::Error& e) {
    std::fprintf(stderr, "trace_worker: %s\n", e.what());
    return 1;
  }
  if (rank != failing) return 0;
  if (!others_wrote(rank, world)) {
    std::fprintf(stderr, "trace_worker: the other ranks wrote no timeline within 5 s\n");
    return 1;
  }
  return code;
}
