// WorkerGroup: the worker processes of one attempt on this node, started, watched and
// stopped together.
//
// Each worker is fork+exec'd with its exact argv and environment in its own process group
// (so a signal to the group reaches whatever it started), stdin from /dev/null, an empty
// signal mask and default signal dispositions, no descriptors above 2, and
// PR_SET_PDEATHSIG(SIGKILL): no worker outlives the launcher, even a SIGKILLed one.
// (PDEATHSIG follows the thread that forked, so start() belongs to the main thread.)
// argv[0] without a '/' is looked up in the worker's own PATH; a failed exec writes
// "tdistrun: cannot execute '<argv0>': <reason>" to the worker's stderr and exits 127.
//
// Streams: stderr always goes through a pipe, so the last ~64 KiB stay available for the
// failure summary; it is shown on the console unchanged unless redirected, teed or
// filtered. stdout goes straight to the terminal (no relay cost) or straight to its file
// when only redirected, and through a pipe when teed or filtered. Teed lines are shown
// with the prefix; redirected and teed streams get raw bytes in their files (output.h).
//
// Thread-safety: none; one thread (main) drives a group, and the group reads the shared
// Signals fd (signals.h; start() installs it when main has not). Failures: start() throws
// tdist::InvalidArgument for a bad spec and tdist::Error when a pipe, file or process
// cannot be made, after stopping the workers it already started. Worker failures are
// events, not exceptions.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdistrun/output.h"

namespace tdist::launcher {

// Bits of WorkerSpec's stream masks.
inline constexpr int kStdoutBit = 1;
inline constexpr int kStderrBit = 2;

struct WorkerSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in env's PATH
  std::vector<std::string> env;   // the complete environment, "NAME=value"
  int redirect_mask = 0;          // streams written only to files (kStdoutBit | kStderrBit)
  int tee_mask = 0;               // streams written to files and the console (wins over redirect)
  bool console = true;            // false: nothing of this worker is shown on the console
  std::string stdout_path;        // the file of a redirected/teed stdout ("" otherwise)
  std::string stderr_path;        // the file of a redirected/teed stderr ("" otherwise)
  std::string prefix;             // before every console line of a teed stream ("[host:rank 3]:")
  // tdistrun --elastic-spares: non-empty for a spare worker (its TDIST_ELASTIC_SPARE id),
  // which waits to be given a rank; the group's success does not wait for it.
  std::string spare;
};

struct WorkerExit {
  int local_rank = -1;
  int global_rank = -1;
  pid_t pid = -1;
  int exit_code = 0;  // the exit status; -signal when killed (Python's returncode, as torchrun)
  int signal = 0;     // the signal that killed it, 0 if it exited
  std::chrono::system_clock::time_point when;  // when the launcher reaped it
  bool stopped_by_us = false;                  // it ended after stop() began
  bool accepted = false;                       // accept_failures() took it: no longer an event
  bool spare = false;                          // it was a spare, never given a rank
  bool failed() const { return signal != 0 || exit_code != 0; }
};

class WorkerGroup {
 public:
  // Starts every worker, in order.
  static std::unique_ptr<WorkerGroup> start(std::vector<WorkerSpec> specs);
  ~WorkerGroup();  // stop(SIGKILL, 0) unless stopped
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  enum class Event { kAllSucceeded, kWorkerFailed, kSignal, kTimeout };

  // Relays output and reaps workers until one of the events; blocks in poll, never spins.
  // kWorkerFailed: a worker exited non-zero or was killed (it stays reported by later
  // calls). kSignal: a terminating signal arrived during this call (it wins over a failure
  // seen at the same moment); Signals::terminating_signal() names it. kAllSucceeded: every
  // worker exited 0 (its remaining output relayed). kTimeout: `until` passed. After stop()
  // every worker is reaped, so it answers at once.
  Event wait(std::chrono::steady_clock::time_point until);

  // Sends `sig` to every worker's process group, relays output and reaps until all workers
  // exited or `grace` passed, then SIGKILLs every group (leftover grandchildren too), reaps
  // the rest, and relays and closes every stream. A further terminating signal during the
  // grace cuts it short. Exits reaped from now on are stopped_by_us. Idempotent.
  void stop(int sig, std::chrono::milliseconds grace);

  // tdistrun --elastic: the failures reported so far are no longer kWorkerFailed events
  // (the job goes on without those workers, or with replacements).
  void accept_failures();
  // Starts worker `local_rank` again with its spec, once it has exited (a replacement).
  // InvalidArgument for an unknown or running worker; Error as start().
  void restart(int local_rank);
  // Whether a worker exited 0.
  bool any_succeeded() const;
  // Spares (WorkerSpec::spare): the local rank and id of one that is running and waiting, if
  // any; promote() makes it the worker of `global_rank` (messages and exits name that);
  // add() starts one more worker (a new spare).
  std::optional<std::pair<int, std::string>> idle_spare() const;
  void promote(int local_rank, int global_rank, std::string prefix);
  void add(WorkerSpec spec);

  const std::vector<WorkerExit>& exits() const { return exits_; }  // in reap order
  std::vector<pid_t> pids() const;                                 // in start order

  // The last max_lines lines the worker wrote to stderr, each ending in '\n' ("" for an
  // unknown rank). Kept for every worker, whatever its redirects.
  std::string stderr_tail(int local_rank, size_t max_lines) const;

 private:
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool running = false;
    std::optional<StreamRelay> out;  // set when stdout is captured
    std::optional<StreamRelay> err;
  };

  explicit WorkerGroup(int signal_fd) : signal_fd_(signal_fd) {}
  void spawn(Worker& worker);
  // One poll over the signal fd and the pipes (until `until` at the latest), relaying and
  // reaping what it finds. Returns the terminating signal drained, or 0.
  int pump(std::chrono::steady_clock::time_point until);
  void reap(bool block);
  void record_exit(Worker& worker, int status);
  void signal_groups(int sig) const;
  bool any_running() const;
  bool any_worker_running() const;  // a running worker that is not a spare

  int signal_fd_;
  std::deque<Worker> workers_;  // a deque: add() never moves a running worker
  std::vector<WorkerExit> exits_;
  bool stopping_ = false;
  bool stopped_ = false;
};

}  // namespace tdist::launcher
