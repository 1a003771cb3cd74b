// Helpers for the shared-memory-specific tests (the cases every transport shares are in
// the conformance suite, comm_conformance.h): options with a small ring.
#pragma once

#include <cstddef>

#include "comm_test_util.h"
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

}  // namespace tdist::transport::testing
