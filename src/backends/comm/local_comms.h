// Comm factories of the built-in backends: `tcp` (TCP channels to every peer), `shm` (every
// rank on one host, shared-memory channels) and `auto` (each peer gets the best kind of
// channel that reaches it: shared memory inside a host, TCP between hosts; the kinds and
// their order come from TDIST_CHANNELS).
//
// All three build one Comm through transport::connect_comm (transport/connect.h), which
// exchanges host keys through the group's store, so every rank makes the same choice and
// the Comm knows which ranks share a host (its topology, for hierarchical collectives).
// Blocking: until every channel is connected, or the timeout (TimeoutError). Failures:
// `shm` with ranks on more than one host is InvalidArgument naming a rank on another host
// and pointing to `auto`; transport setup errors pass through.
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

std::unique_ptr<transport::Comm> make_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout);

}  // namespace tdist::backends
