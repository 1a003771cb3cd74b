// Comm factories of the built-in backends: `tcp`, `shm` (every rank on one host) and `auto`
// (shared memory when every rank of the group is on this host, else TCP).
//
// `shm` and `auto` first publish this rank's host key (transport::shm_host_key(): boot id
// and network namespace) in the group's store and read everyone's, so every rank makes the
// same choice. `auto` spanning hosts uses TCP between every pair, also inside a host: the
// shared-memory transport moves data only while its process waits on it (shm_comm.h), so
// mixing it per peer with TCP could stall a ring whose rank waits on a TCP peer while its
// shared-memory send is queued. Sub-groups choose again, so a sub-group inside one host
// gets shared memory. Blocking: until every rank published its key and the
// transports are connected, or the timeout (TimeoutError). Failures: `shm` with ranks on
// more than one host is InvalidArgument naming a rank on another host and pointing to
// `auto`; transport setup errors pass through.
#pragma once

#include <chrono>
#include <memory>

#include "tdist/store.h"
#include "transport/comm.h"

namespace tdist::backends {

std::unique_ptr<transport::Comm> make_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout);

std::unique_ptr<transport::Comm> make_auto_comm(std::shared_ptr<Store> store, int rank, int size,
                                                std::chrono::milliseconds timeout);

// The TCP transport with the group's timeout (the `tcp` backend, and `auto` between hosts).
std::unique_ptr<transport::Comm> make_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout);

}  // namespace tdist::backends
