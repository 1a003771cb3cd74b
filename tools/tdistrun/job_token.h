// The job's authentication token (net/auth.h): every store and transport connection of the
// job proves it knows it. A job confined to this node (--nnodes 1, --standalone) gets a
// fresh random token unless it was given one; a job that spans nodes takes the one it is
// given (TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE, the same on every node) and runs
// unauthenticated, with a warning, without one. TDIST_AUTH_TOKEN set to the empty string
// turns authentication off. The token goes into this process's environment, so the
// agent's store and every worker inherit it: call before any thread exists (setenv).
#pragma once

#include <string>

#include "tdistrun/options.h"

namespace tdist::launcher {

// What was decided, for a log line: "fresh", "given", "off" or "none".
std::string ensure_job_token(const Options& options);

}  // namespace tdist::launcher
