// Job records: how `tdist-status` finds, with no arguments, a job that tdistrun started on
// this machine, and its authentication token when tdistrun made one (a fresh token is in no
// file or variable the user has).
//
// Each running tdistrun keeps one file in a folder of the user's own: $XDG_RUNTIME_DIR/tdist
// when that variable names a folder, else /tmp/tdist-<uid>; the folder has mode 0700 and
// must belong to the user (a folder that does not, or that others may write, is refused:
// nothing is written there or read from it). The file job-<tdistrun's pid> has mode 0600
// and holds lines "endpoint=HOST:PORT" (the job's store, where its ranks publish their
// status), "run_id=ID" and, when tdistrun made the token, "token=HEX" (the workers'
// environment, readable by the same user, holds it too). It is written once the store is
// up and removed when tdistrun exits; a record whose process is gone (a SIGKILLed tdistrun)
// is removed by the next reader.
// Thread-safety: the functions touch only the file system; any thread.
#pragma once

#include <string>
#include <vector>

namespace tdist::diag {

struct JobRecord {
  long pid = 0;  // the tdistrun process
  std::string endpoint;
  std::string run_id;
  std::string token;  // empty unless tdistrun made it
};

// The folder of this user's records, created if missing; throws tdist::Error when it cannot
// be made or is not the user's own.
std::string job_record_folder();

// Writes `record` (its pid: this process's) atomically; returns the file's path. Throws
// tdist::Error on failure.
std::string write_job_record(const JobRecord& record);
void remove_job_record(const std::string& path);  // best effort

// The records of this user's running tdistruns, by pid (a missing folder: none). Throws
// tdist::Error when the folder is not the user's own.
std::vector<JobRecord> live_job_records();

}  // namespace tdist::diag
