// Helpers for the shared-memory transport tests: N ranks as threads over one HashStore
// (abstract sockets and memfds work within one process just as across processes). Byte
// patterns and error_of come from tcp_test_util.h.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "tcp_test_util.h"
#include "tdist/hash_store.h"
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

// Runs body(comm) on `world` threads, one per rank, each with its own shared-memory Comm;
// rethrows the first exception a rank threw (after every thread finished).
inline void run_shm_ranks(int world, const std::function<void(Comm&)>& body,
                          const ShmCommOptions& options = shm_options()) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect_shm_comm(store, r, world, options);
        body(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace tdist::transport::testing
