// The torch.distributed-style entry points: one default process group per process.
//
//   tdist::init_process_group("tcp");            // env:// from the launcher
//   int rank = tdist::get_rank();
//   ...
//   tdist::destroy_process_group();
//
// init_process_group checks the backend name first (InvalidArgument listing the
// registered backends), then rendezvouses (rendezvous.h) and asks the backend's factory
// for the group. It blocks until every rank has joined or `timeout` passes
// (TimeoutError). When it throws, nothing is left initialized and it may be called
// again. Calling it while a group exists is an Error ("already initialized; call
// destroy_process_group first"). After success the log lines carry the rank.
//
// The getters throw Error when no group is initialized. destroy_process_group releases
// the default group (its store and, on rank 0, the hosted store server once nothing else
// holds them); it too throws Error when nothing is initialized. Thread-safe: the default
// group is guarded by a mutex; init_process_group does not hold it while it blocks, and
// a second init running concurrently is an Error.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/rendezvous.h"
#include "tdist/store.h"

namespace tdist {

// backend: a registered name (backend.h). init_method: env://, tcp://..., file://...
// (rendezvous.h). world_size / rank: -1 takes them from the init method or environment.
// store: when given, used instead of init_method (as torch's store= argument); rank and
// world_size are then required and the ranks still join on it (rendezvous.h's layout).
void init_process_group(const std::string& backend, const std::string& init_method = "env://",
                        int world_size = -1, int rank = -1,
                        std::chrono::milliseconds timeout = default_pg_timeout(),
                        std::shared_ptr<Store> store = nullptr);

void destroy_process_group();
bool is_initialized();

int get_rank();
int get_world_size();
std::string get_backend();
std::shared_ptr<ProcessGroup> get_default_group();

// Writes the flight records (ProcessGroup::flight_record) of every live group of this
// process to TDIST_FLIGHT_RECORDER_FILE + global rank + ".json" and returns the paths. A
// group's first failure (timeout, dead peer, desync) does the same by itself, and so does
// SIGUSR1 after init_process_group (unless the program handles SIGUSR1).
// tools/tdist_flight.py merges the files of every rank.
std::vector<std::string> dump_flight_records();

}  // namespace tdist
