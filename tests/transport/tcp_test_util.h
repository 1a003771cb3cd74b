// Helpers for the TCP-specific tests (the cases every transport shares are in the
// conformance suite, comm_conformance.h): N ranks as threads with TcpCommOptions.
#pragma once

#include <functional>
#include <memory>

#include "comm_test_util.h"
#include "transport/comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::transport::testing {

inline TcpCommOptions test_options() {
  TcpCommOptions o = TcpCommOptions::from_settings();
  o.timeout = kSetupTimeout;
  return o;
}

// run_comm_ranks (comm_test_util.h) over the TCP transport.
inline void run_ranks(int world, const std::function<void(Comm&)>& body,
                      const TcpCommOptions& options = test_options()) {
  run_comm_ranks(
      world,
      [&](std::shared_ptr<Store> store, int r, int w) {
        return connect_tcp_comm(std::move(store), r, w, options);
      },
      body);
}

}  // namespace tdist::transport::testing
