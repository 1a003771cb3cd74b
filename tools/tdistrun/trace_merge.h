// The job's timeline (TDIST_TRACE=DIR, src/diag/trace.h): each worker writes
// DIR/tdist_trace_rank<global rank>.json; once the workers ended (success or failure), the
// agent merges the files of ranks 0..world_size-1 found in DIR into DIR/tdist_trace.json
// (every event as it is: pid is already the global rank and ts wall-clock time). On
// several nodes each agent merges what its DIR holds (a node-local DIR: that node's ranks).
// Before each round the agent removes its own ranks' files, so a rank that writes nothing
// in the last round leaves nothing stale, and the merged timeline is the last round's.
//
// Failure behaviour: never throws; an unreadable or incomplete rank file is left out and
// named in the returned line. Thread-safe: plain functions of their arguments and DIR.
#pragma once

#include <string>
#include <vector>

namespace tdist::launcher {

// Removes DIR/tdist_trace_rank<r>.json for each of `ranks` (missing files are fine).
void remove_rank_traces(const std::string& dir, const std::vector<int>& ranks);

// Merges the rank files into DIR/tdist_trace.json; returns the line to log ("timeline of
// 2 ranks written to DIR/tdist_trace.json"), or "" when DIR holds no rank file.
std::string merge_traces(const std::string& dir, int world_size);

}  // namespace tdist::launcher
