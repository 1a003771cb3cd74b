// idle_cpu: the CPU a rank burns while it waits on nothing — issue 13's "a job waiting on
// nothing uses about 0% CPU". Run under a launcher with 2 ranks (tdistrun
// --nproc-per-node 2 idle_cpu [BACKEND] [SECONDS]); for each of two waits, every rank but
// rank 0 blocks while rank 0 sleeps SECONDS, then they meet:
//   recv        the others wait in recv() on a message rank 0 sends after its sleep;
//   all_reduce  the others wait in all_reduce(), which rank 0 joins after its sleep.
// Each rank prints the CPU time (user + system, all its threads) it used during the
// wait, as a percentage of one core.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tdist/distributed.h"
#include "tdist/process_group.h"

namespace {

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

template <typename F>
void measure(const char* what, tdist::ProcessGroup& pg, double seconds, F wait) {
  pg.barrier()->wait();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("idle_cpu rank=%d wait=%s wall_s=%.2f cpu_s=%.4f cpu_pct=%.2f\n", pg.rank(), what,
              wall, cpu_seconds() - cpu0, 100.0 * (cpu_seconds() - cpu0) / wall);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "auto";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10.0;
  tdist::init_process_group(backend);
  auto pg = tdist::get_default_group();
  int value = 0;
  measure("recv", *pg, seconds, [&] {
    if (pg->rank() == 0) {
      for (int r = 1; r < pg->size(); ++r) pg->send(&value, 1, tdist::DType::kI32, r);
    } else {
      pg->recv(&value, 1, tdist::DType::kI32, 0);
    }
  });
  measure("all_reduce", *pg, seconds, [&] {
    pg->all_reduce(&value, 1, tdist::DType::kI32, tdist::ReduceOpKind::kSum)->wait();
  });
  tdist::destroy_process_group();
  return 0;
}
