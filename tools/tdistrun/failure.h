// What tdistrun knows about a failed worker, and the summary it prints when it gives up.
//
// Each agent makes a FailureRecord per failed worker: how it ended, when, and the error it
// reported in its TORCHELASTIC_ERROR_FILE (read_error_file understands torch's @record
// format and the plain one). Records travel between nodes as JSON (serialize /
// parse_failure). When no restarts remain, format_summary turns the job's records into the
// text printed on stderr, root cause first, and summary_exit_code picks tdistrun's exit code.
//
// Failure behaviour: parse_failure throws InvalidArgument on text that is not a record;
// read_error_file never throws (a missing or unreadable file means "no error reported").
// Thread-safe: plain functions of their arguments (format_summary reads the local time zone).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tdist::launcher {

struct FailureRecord {
  int global_rank = -1, local_rank = -1, node_rank = 0, round = 0;
  std::string host;         // hostname of the node
  int exit_code = 0;        // when it exited
  int signal = 0;           // != 0: killed by this signal
  int64_t time_us = 0;      // unix time of the failure, microseconds
  std::string log_file;     // its stderr log file when redirected, else ""
  std::string error_file;   // path of its TORCHELASTIC_ERROR_FILE
  std::string error;        // message read from the error file ("" if none was written)
  std::string traceback;    // extraInfo.py_callstack, if present
  std::string stderr_tail;  // the last lines of its stderr

  friend bool operator==(const FailureRecord&, const FailureRecord&) = default;
};

// One line of JSON holding every field; parse_failure(serialize(r)) == r.
std::string serialize(const FailureRecord& record);
// The record serialize wrote. InvalidArgument when `text` is not JSON, not an object, or
// lacks a field or has one of the wrong type.
FailureRecord parse_failure(const std::string& text);

// Reads a torch-format error file and returns {message, traceback}:
//   {"message": {"message": M, "extraInfo": {"py_callstack": T, ...}}} -> {M, T}
//   {"message": M, "timestamp": ...}                                   -> {M, ""}
// When the dict has a traceback but no message, the message is the traceback's last line
// (Python's "Type: text"). A missing, empty or malformed file gives {"", ""}.
std::pair<std::string, std::string> read_error_file(const std::string& path);

// When the error file at `path` was last written (unix time, microseconds); 0 when there is
// none. A worker that wrote one failed then: the launcher orders failures by it rather than
// by when it reaped them (two exits reaped in one pass would otherwise be in rank order).
int64_t error_file_time_us(const std::string& path);

// The text printed on stderr when no restarts remain: a header line with the run id, the
// number of failed workers and the restarts used, then the root cause (the earliest
// time_us; ties go to the lower global rank), then the other failures in time order.
// Each shows global and local rank, host and node rank, "exit code N" or
// "signal SIGKILL (9)", the time (ISO 8601, local time, milliseconds), the log file (or
// "<console>"), the error (or "no error reported; see the stderr tail below"), the
// traceback when it says more than the error, and the stderr tail, indented. Identical
// records are shown once. Ends with a newline.
std::string format_summary(const std::string& run_id, std::vector<FailureRecord> records,
                           int restarts_used, int max_restarts);

// tdistrun's exit code when it gives up: the root cause's exit code, or 128 + signal when
// it was killed; 1 when there are no records or the root cause exited with 0.
int summary_exit_code(const std::vector<FailureRecord>& records);

// "SIGSEGV", "SIGKILL", ...; "SIGRTMIN+3" for real-time signals; "signal 99" otherwise.
std::string signal_name(int signal);

}  // namespace tdist::launcher
