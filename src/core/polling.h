// Polling: whether, and for how long, a thread that waits on a Comm polls its channels
// before it sleeps ("poll, then sleep", as MPI implementations wait).
//
// Polling trades a core for latency: a waiter that spins sees a message within a
// fraction of a microsecond, one that sleeps in poll() pays a wake-up (5-50 us). So:
//  - Only a thread that waits for its own result polls. Background threads (a process
//    group's worker, which serves work nobody waits on) mark themselves with
//    BackgroundThread and always sleep at once: a job waiting on nothing uses no CPU.
//  - Only when the machine has a core for each local rank: the CPUs that the Comm's ranks
//    on this machine may run on together (the union of their affinity masks, exchanged
//    when the Comm is built; ranks pinned one to a core, as mpirun binds them, have one
//    each) >= local ranks (the largest of the launcher's LOCAL_WORLD_SIZE, OpenMPI's and
//    Slurm's equivalents, and the Comm's ranks on this machine). A machine is one kernel
//    (topology.h: one boot id), so ranks in several network namespaces or containers of
//    one machine count together. Otherwise waiters sleep at once and leave the cores to
//    the ranks that compute.
//  - For a bounded, adaptive time (PollBudget): at most TDIST_POLL_US; doubled each time
//    work came within that limit (even after the driver gave up polling and slept: a
//    longer poll would have caught it without a wake-up), halved each time it came later.
// Thread-safety: the free functions are thread-safe; a PollBudget belongs to one driver.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace tdist::core {

// Marks the current thread as a background thread for its lifetime (scoped; nests).
class BackgroundThread {
 public:
  BackgroundThread();
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

 private:
  bool previous_;
};

bool on_background_thread();

// One spin of a polling loop: tells the core that this thread waits (x86 pause, arm yield).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Cores this process may run on (its affinity mask).
int usable_cores();
// This process's affinity mask as a CPU list, e.g. "0-3,8".
std::string affinity_list();
// The number of distinct CPUs in the union of CPU lists (affinity_list()'s form; a
// malformed list counts as empty).
int union_cpu_count(const std::vector<std::string>& lists);
// Local ranks announced by the launcher (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE,
// SLURM_NTASKS_PER_NODE's first figure); 0 when none says.
int launcher_local_ranks();

// The longest a waiter of a Comm with `comm_local_ranks` ranks on this machine, which may
// run on `comm_local_cpus` CPUs together (0: unknown, this process's usable_cores()), may
// poll: TDIST_POLL_US, or zero when the machine lacks a core per local rank.
std::chrono::nanoseconds poll_limit(int comm_local_ranks, int comm_local_cpus = 0);

class PollBudget {
 public:
  explicit PollBudget(std::chrono::nanoseconds limit)
      : limit_(limit), floor_(limit / 32), current_(limit) {}

  std::chrono::nanoseconds current() const { return current_; }
  // A driver that ran out of work found some again after `waited` (polling, or polling
  // then sleeping). Waits within the limit are what polling is for: poll longer next time
  // (doubling up to the limit). Longer ones (a peer computing) only burn the core: poll
  // less (halving down to 1/32 of the limit, so that polling can still prove itself).
  void record(std::chrono::nanoseconds waited) {
    current_ = waited <= limit_ ? std::min(limit_, current_ * 2) : std::max(floor_, current_ / 2);
  }

 private:
  const std::chrono::nanoseconds limit_;
  const std::chrono::nanoseconds floor_;
  std::chrono::nanoseconds current_;
};

}  // namespace tdist::core
