// Helpers for the shared-memory transport tests: N ranks as threads over one HashStore
// (abstract sockets and memfds work within one process just as across processes). Byte
// patterns and error_of come from tcp_test_util.h.
#pragma once

#include <functional>
#include <memory>

#include "tcp_test_util.h"
#include "transport/comm.h"
#include "transport/shm/shm_comm.h"

namespace tdist::transport::testing {

// A small ring, so that modest messages wrap and stream.
inline constexpr size_t kSmallRing = 64 * 1024;

inline ShmCommOptions shm_options(size_t ring_bytes = kSmallRing) {
  ShmCommOptions o;
  o.timeout = kSetupTimeout;
  o.ring_bytes = ring_bytes;
  return o;
}

// run_comm_ranks (tcp_test_util.h) over the shared-memory transport.
inline void run_shm_ranks(int world, const std::function<void(Comm&)>& body,
                          const ShmCommOptions& options = shm_options()) {
  run_comm_ranks(
      world,
      [&](std::shared_ptr<Store> store, int r, int w) {
        return connect_shm_comm(std::move(store), r, w, options);
      },
      body);
}

}  // namespace tdist::transport::testing
