// The node agent: one per node, it runs the whole job from this node's side.
//
// Per round: meet the other agents (NodeRendezvous), start this node's workers with
// torchrun's environment (WorkerGroup), then watch them and the other nodes. A worker
// failure, a lost node or a node waiting to join ends the round on every node; the
// job-wide restart budget decides whether another round starts. When none remains, the
// failure summary (root cause first) goes to stderr. Terminating signals are forwarded
// to the workers, which get a grace period before SIGKILL.
//
// Call from the main thread after Signals::install(); not thread-safe.
// Returns the launcher's exit status: 0 on success, the root-cause worker's exit code
// (128+signal when it was killed) when restarts ran out, 128+signal when tdistrun was
// signalled. Setup errors (bad endpoint, port in use, rendezvous timeout) throw Error.
#pragma once

#include "tdistrun/options.h"

namespace tdist::launcher {

// fresh_token: the job's token was made by this tdistrun (ensure_job_token), so its job
// record (diag/job_record.h) carries it for tdist-status.
int run_agent(const Options& options, bool fresh_token = false);

}  // namespace tdist::launcher
