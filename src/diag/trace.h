// Timeline (TDIST_TRACE=DIR): a Chrome/Perfetto trace per rank, in the JSON object format
// of the Trace Event Format ({"traceEvents":[...]}), written to
// DIR/tdist_trace_rank<global rank>.json. Open it (or tdistrun's merged
// DIR/tdist_trace.json) in https://ui.perfetto.dev or chrome://tracing.
//
// What goes in: every collective of every process group as one complete event ("ph":"X",
// ProcessGroup::note_finished, from the flight recorder's record of it) on the group's
// track, and the DDP buckets (src/torch/reducer*.cc) on the track "DDP buckets". pid is
// the global rank, tid a small number per track of that rank, named by a "thread_name"
// metadata event ("group default (tcp)").
// Time base: "ts" and "dur" are microseconds; ts is wall-clock time since the Unix epoch
// (the steady clock of the events plus wall - steady sampled once per process), so the
// files of several ranks, and hosts with synchronised clocks, line up as they are. Each
// file's "otherData" holds that anchor too ("ts_base":"unix_epoch_us", wall_ns, steady_ns:
// ts = (steady - steady_ns + wall_ns) / 1000), with the rank, host and process id.
//
// Writing: events are buffered in memory (one mutex for the process) and appended to each
// rank's file when 10,000 are pending or a second passed since the last write (checked as
// events arrive), when a traced group is destroyed (destroy_process_group), on
// flush_trace(), and at process exit (atexit). Each write leaves a complete JSON file (the
// new events go where the closing "]}" was, followed by a new one). A process that dies by
// a signal (SIGKILL, or SIGTERM without a handler) loses what it buffered since its last
// write.
// Cost when TDIST_TRACE is unset: trace_enabled() is one check of a bool read once per
// process (the first call reads the setting).
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tdist::diag {

class FlightRecorder;

// Whether TDIST_TRACE names a folder (read at the first call, then cached).
bool trace_enabled();

// The event's "args" object, built field by field (in that order; texts may hold any
// bytes: invalid UTF-8 is written as U+FFFD).
class TraceArgs {
 public:
  // An integer, a text, or microseconds (add_us).
  using Value = std::variant<int64_t, uint64_t, double, std::string>;

  TraceArgs& add_int(std::string_view key, int64_t value);
  TraceArgs& add_uint(std::string_view key, uint64_t value);
  TraceArgs& add_text(std::string_view key, std::string_view value);
  TraceArgs& add_us(std::string_view key, int64_t ns);  // a duration, as microseconds

  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, Value>> fields_;
};

// The time base of every event: steady-clock nanoseconds (FlightRecorder's steady_ns).
int64_t trace_now_ns();

// The track `name` of global rank `rank`: a small tid, the same for the same name within
// the process; its first use emits the track's name (and the rank's, on its first track).
int trace_track(int rank, std::string_view name);

// A complete event from start_ns to end_ns (trace_now_ns's clock).
void trace_complete(int rank, int track, std::string_view name, std::string_view category,
                    int64_t start_ns, int64_t end_ns, const TraceArgs& args);
// An instant event (thread scope).
void trace_instant(int rank, int track, std::string_view name, std::string_view category,
                   int64_t at_ns, const TraceArgs& args);

// Collective `seq` of a group, just finished (error: null or its failure): one complete
// event named by the operation, from the recorder's record of it (started, else queued, to
// finished), args: group, seq, dtype, count, bytes, root, reduce_op, queued_us, algorithm
// (what the backend ran, when it says: "ring", "hierarchical", "mpi"), error. When the
// recorder no longer holds `seq` (TDIST_FLIGHT_RECORDER_SIZE=0, or more operations queued
// since), the event is named "collective" and has only seq, group, algorithm and error.
void trace_collective(int rank, int track, std::string_view group, uint64_t seq,
                      const FlightRecorder& recorder, const std::exception_ptr& error,
                      std::string_view algorithm);

// Writes every buffered event now; returns the files written (one per rank with events).
// Callable any time (tests), also when tracing is off (returns nothing).
std::vector<std::string> flush_trace();

// DIR/tdist_trace_rank<rank>.json for TDIST_TRACE=DIR.
std::string trace_file(const std::string& dir, int rank);

}  // namespace tdist::diag
