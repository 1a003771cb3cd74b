// tdist-bench --nproc: the tool as its own launcher on one host.
//
// spawn_local() hosts a TCPStoreServer on 127.0.0.1 (port 0), then starts `nproc` copies
// of this executable (fork + execve of /proc/self/exe, argv without --nproc) with
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// TDIST_USE_AGENT_STORE=1 and OMP_NUM_THREADS=1 set, as tdistrun would, each pinned to
// a CPU of its own when there are enough with --bind core (mpirun's default). Children die with
// the parent (PR_SET_PDEATHSIG). It waits for all of them until `options.timeout` has
// passed; when one fails (non-zero exit or a signal) or the deadline passes, it stops the
// others (SIGTERM, then SIGKILL after a grace period), reaps every child, and says which
// rank failed and how. Returns 0 when every rank exited 0, else the first failing rank's
// exit status (1 when it died by a signal or the deadline passed).
// Call from the main thread, once; not thread-safe.
#pragma once

#include "tdist_bench/options.h"

namespace tdist_bench {

int spawn_local(int argc, const char* const* argv, const Options& options);

}  // namespace tdist_bench
