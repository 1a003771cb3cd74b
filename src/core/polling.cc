// Polling policy (polling.h).
#include "core/polling.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "tdist/settings.h"

namespace tdist::core {
namespace {

thread_local bool background = false;

int leading_int(const std::string& text) {
  // "4" -> 4; Slurm's "4(x2),3" -> 4; anything else -> 0.
  int n = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && n < (1 << 20); ++i) {
    n = n * 10 + (text[i] - '0');
  }
  return i == 0 ? 0 : n;
}

}  // namespace

BackgroundThread::BackgroundThread() : previous_(background) { background = true; }
BackgroundThread::~BackgroundThread() { background = previous_; }

bool on_background_thread() { return background; }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::string affinity_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::string out;
  for (int cpu = 0; cpu < CPU_SETSIZE;) {
    if (!CPU_ISSET(cpu, &set)) {
      ++cpu;
      continue;
    }
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(cpu);
    if (last > cpu) out += "-" + std::to_string(last);
    cpu = last + 1;
  }
  return out;
}

int union_cpu_count(const std::vector<std::string>& lists) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const std::string& list : lists) {
    // "a" or "a-b", comma-separated; stop at anything else.
    const char* p = list.data();
    const char* const end = p + list.size();
    while (p < end) {
      unsigned first = 0;
      auto parsed = std::from_chars(p, end, first);
      if (parsed.ec != std::errc()) break;
      unsigned last = first;
      if (parsed.ptr < end && *parsed.ptr == '-') {
        parsed = std::from_chars(parsed.ptr + 1, end, last);
        if (parsed.ec != std::errc()) break;
      }
      for (unsigned c = first; c <= last && c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
      p = parsed.ptr;
      if (p < end && *p != ',') break;
      ++p;
    }
  }
  return CPU_COUNT(&set);
}

int launcher_local_ranks() {
  int n = 0;
  for (const char* name :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    n = std::max(n, leading_int(env_string(name)));
  }
  return n;
}

std::chrono::nanoseconds poll_limit(int comm_local_ranks, int comm_local_cpus) {
  const int64_t us = setting_int("TDIST_POLL_US");  // 0..1000000, checked by the registry
  if (us == 0) return std::chrono::nanoseconds(0);
  const int local = std::max(comm_local_ranks, launcher_local_ranks());
  const int cpus = comm_local_cpus > 0 ? comm_local_cpus : usable_cores();
  if (cpus < local) return std::chrono::nanoseconds(0);
  return std::chrono::microseconds(us);
}

}  // namespace tdist::core
