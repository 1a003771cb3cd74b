// Backend registry: backends (tcp, shm, mpi, or a user's own) make themselves available
// to init_process_group by registering a factory under a name, as torch's
// Backend.register_backend does. Nothing here names a backend; a backend's own source
// registers it.
//
// Names are case-insensitive (stored lower-case), non-empty, and contain no spaces, ':'
// or ','. A factory is called with the group's store namespace, rank, world size and
// timeout after the rendezvous has succeeded, and returns the group (or throws; a null
// result is an Error). Thread-safe: any thread may register or look up at any time.
// Failures: InvalidArgument for a bad name, an empty factory, or a name registered twice.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/store.h"

namespace tdist {

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(
    std::shared_ptr<Store> store, int rank, int world_size, std::chrono::milliseconds timeout)>;

// Makes `name` available to init_process_group. Registering a taken name throws.
void register_backend(const std::string& name, BackendFactory factory);

// True when `name` (any case) is registered.
bool has_backend(const std::string& name);

// The registered names, sorted.
std::vector<std::string> registered_backends();

// The factory of `name`; throws InvalidArgument "backend 'x' is not available; registered
// backends: a, b" when it is not registered.
BackendFactory backend_factory(const std::string& name);

}  // namespace tdist
