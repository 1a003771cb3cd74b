// FlightRecorder: the last N collectives of one process group (N = TDIST_FLIGHT_RECORDER_SIZE),
// each with its sequence number, fingerprint (operation, dtype, count, root, reduce op) and
// when it was queued, started and finished, so that a hung or failed job can say what every
// rank was doing (torch's NCCL flight recorder, for every backend).
//
// ProcessGroup records each collective when it is numbered; the built-in backends add start
// and finish (note_started/note_finished). A group's first failure (timeout, dead peer,
// desync), SIGUSR1 (installed by init_process_group when the signal is unhandled) and
// dump_flight_records() write the records of every live group of the process, one JSON file
// per global rank: TDIST_FLIGHT_RECORDER_FILE + rank + ".json". tools/tdist_flight.py
// merges the files of all ranks and prints the first operation where they disagree.
// Thread-safety: every method may be called from any thread (one mutex per recorder; the
// writers hold it for a few stores).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op_fingerprint.h"
#include "tdist/thread_annotations.h"

namespace tdist {
class ProcessGroup;
}

namespace tdist::diag {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);  // 0: records nothing

  void enqueued(uint64_t seq, const core::OpFingerprint& fp);
  void started(uint64_t seq);
  // Returns true for the group's first failure (which dumps).
  bool finished(uint64_t seq, const std::exception_ptr& error);

  // The flight record of `group`, which owns this recorder, as one line of JSON:
  // {"name":..,"backend":..,"rank":..,"size":..,"global_ranks":[..],"next_seq":N,
  //  "record":{"capacity":N,"first_error":"...","ops":[{"seq":..,"op":..,...},...]}}
  // (ops oldest first; invalid UTF-8 in the texts becomes U+FFFD).
  std::string record_json(const ProcessGroup& group, uint64_t next_seq) const;

  // What the status command and the hang warnings show: the last operation finished and
  // the one running (or queued) now, if any.
  struct Summary {
    bool has_last = false;
    uint64_t last_seq = 0;
    core::OpFingerprint last;
    bool has_current = false;
    uint64_t current_seq = 0;
    core::OpFingerprint current;
    bool current_started = false;
    int64_t current_since_ns = 0;  // steady clock: started (or queued)
  };
  Summary summary() const;

  // Collective `seq` as recorded, while the ring still holds it (the timeline, trace.h).
  struct Entry {
    core::OpFingerprint fp;
    int64_t enqueued_ns = 0;
    int64_t started_ns = 0;   // 0: not started
    int64_t finished_ns = 0;  // 0: not finished
    bool failed = false;
  };
  std::optional<Entry> find(uint64_t seq) const;

 private:
  // Written without a lock (the numbering thread enqueues, the running thread marks start
  // and finish), so every field is atomic; `tag` (seq + 1, 0 = empty) is written last on
  // enqueue and read before and after the other fields by readers, who skip a record that
  // changed meanwhile.
  struct Record {
    std::atomic<uint64_t> tag{0};
    std::atomic<uint64_t> w0{0};
    std::atomic<uint64_t> w1{0};
    std::atomic<int64_t> enqueued_ns{0};
    std::atomic<int64_t> started_ns{0};
    std::atomic<int64_t> finished_ns{0};
    std::atomic<bool> failed{false};
  };
  // A consistent copy of the record of `seq`, if the ring holds it.
  std::optional<Entry> read(uint64_t seq) const;

  const size_t capacity_;
  std::unique_ptr<Record[]> ring_;
  std::atomic<uint64_t> newest_{0};  // highest seq recorded + 1
  mutable Mutex mu_;
  std::string first_error_ TDIST_GUARDED_BY(mu_);
};

// Steady-clock nanoseconds, the recorder's time base: CLOCK_MONOTONIC (fine) when the
// timeline is on (TDIST_TRACE), else its coarse variant, which costs a few ns instead of
// ~20 and is a tick (1-4 ms) behind: plenty for "waiting for 12 s".
int64_t steady_ns();
int64_t recorder_ns();

// Process-wide: the live groups (ProcessGroup registers itself at its first collective).
void register_group(const std::weak_ptr<ProcessGroup>& group);
std::vector<std::shared_ptr<ProcessGroup>> live_groups();
// Writes the flight records of every live group, one file per global rank among them;
// returns the paths (empty when writing failed, which is logged). `reason` goes into the
// files ("timeout", "SIGUSR1", ...).
std::vector<std::string> dump_flight_records(const std::string& reason);
// SIGUSR1 dumps (once per process; only when SIGUSR1 is not handled already).
void install_dump_signal();

}  // namespace tdist::diag
