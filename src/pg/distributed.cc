// The default process group and the torch.distributed-style free functions
// (distributed.h).
#include "tdist/distributed.h"

#include <utility>

#include "diag/flight_recorder.h"
#include "diag/status.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/error_file.h"
#include "tdist/logging.h"
#include "tdist/settings.h"
#include "tdist/thread_annotations.h"

namespace tdist {
namespace {

struct World {
  Mutex mu;
  std::shared_ptr<ProcessGroup> group TDIST_GUARDED_BY(mu);
  bool initializing TDIST_GUARDED_BY(mu) = false;  // an init is running
};

World& world() {
  static World* w = new World();  // never destroyed: groups may outlive static destructors
  return *w;
}

std::shared_ptr<ProcessGroup> require_group(const char* caller) {
  World& w = world();
  MutexLock lock(w.mu);
  if (w.group == nullptr) {
    TDIST_THROW(Error, caller,
                ": the default process group is not initialized; call init_process_group first");
  }
  return w.group;
}

// Clears World::initializing when init_process_group leaves, however it leaves.
class InitGuard {
 public:
  InitGuard() {
    World& w = world();
    MutexLock lock(w.mu);
    if (w.group != nullptr) {
      TDIST_THROW(Error, "init_process_group: the default process group is already initialized ",
                  "(backend '", w.group->backend_name(), "', rank ", w.group->rank(), " of ",
                  w.group->size(), "); call destroy_process_group first");
    }
    if (w.initializing) {
      TDIST_THROW(Error,
                  "init_process_group: another thread is initializing the default "
                  "process group");
    }
    w.initializing = true;
  }
  ~InitGuard() {
    World& w = world();
    MutexLock lock(w.mu);
    w.initializing = false;
  }
  InitGuard(const InitGuard&) = delete;
  InitGuard& operator=(const InitGuard&) = delete;
};

}  // namespace

void init_process_group(const std::string& backend, const std::string& init_method, int world_size,
                        int rank, std::chrono::milliseconds timeout, std::shared_ptr<Store> store) {
  // A worker's uncaught exception then reaches the launcher's failure summary.
  record_errors();
  diag::install_dump_signal();
  InitGuard guard;
  // The backend is checked before anything is contacted.
  BackendFactory factory = backend_factory(backend);
  TDIST_CHECK(timeout.count() >= 0, InvalidArgument, "init_process_group: timeout ",
              timeout.count(), " ms is negative");
  check_settings();  // a bad TDIST_* value fails here, on every rank, before any contact

  RendezvousResult joined;
  if (store != nullptr) {
    TDIST_CHECK(
        world_size >= 1, InvalidArgument,
        "init_process_group with a store needs world_size (>= 1); got world_size=", world_size);
    TDIST_CHECK(rank >= 0, InvalidArgument,
                "init_process_group with a store needs rank (>= 0); got rank=", rank);
    joined = rendezvous(std::move(store), rank, world_size, timeout);
  } else {
    joined = rendezvous(init_method, rank, world_size, timeout);
  }

  std::shared_ptr<ProcessGroup> group =
      factory(joined.store, joined.rank, joined.world_size, timeout);
  TDIST_CHECK(group != nullptr, Error, "init_process_group: backend '", backend,
              "' returned no process group");
  TDIST_CHECK(group->rank() == joined.rank && group->size() == joined.world_size, Error,
              "init_process_group: backend '", backend, "' made a group with rank ", group->rank(),
              " of ", group->size(), ", expected rank ", joined.rank, " of ", joined.world_size);

  {
    World& w = world();
    MutexLock lock(w.mu);
    w.group = group;
  }
  set_log_rank(joined.rank);
  diag::start_status_responder(group);
  TDIST_LOG(kInfo) << "initialized process group: backend " << group->backend_name() << ", rank "
                   << joined.rank << " of " << joined.world_size;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    World& w = world();
    MutexLock lock(w.mu);
    if (w.group == nullptr) {
      TDIST_THROW(Error, "destroy_process_group: the default process group is not initialized");
    }
    group = std::move(w.group);
    w.group = nullptr;
  }
  set_log_rank(-1);
  diag::stop_status_responder();
  group.reset();  // outside the lock: a backend's teardown may block
}

bool is_initialized() {
  World& w = world();
  MutexLock lock(w.mu);
  return w.group != nullptr;
}

int get_rank() { return require_group("get_rank")->rank(); }
int get_world_size() { return require_group("get_world_size")->size(); }
std::string get_backend() { return require_group("get_backend")->backend_name(); }
std::shared_ptr<ProcessGroup> get_default_group() { return require_group("get_default_group"); }

std::vector<std::string> dump_flight_records() { return diag::dump_flight_records("on request"); }

}  // namespace tdist
