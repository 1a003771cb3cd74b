// Helpers for the TCP transport tests: running N ranks as threads over one HashStore,
// byte patterns, and catching the message of an expected exception.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tdist/hash_store.h"
#include "transport/comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::transport::testing {

inline constexpr auto kSetupTimeout = std::chrono::seconds(20);

inline TcpCommOptions test_options() {
  TcpCommOptions o;
  o.timeout = kSetupTimeout;
  return o;
}

// Connects rank r of `world` through `store` with some transport.
using ConnectFn =
    std::function<std::unique_ptr<Comm>(std::shared_ptr<Store> store, int rank, int world)>;

// Runs body(comm) on `world` threads, one per rank, each with its own Comm from `connect`;
// rethrows the first exception a rank threw (after every thread finished).
inline void run_comm_ranks(int world, const ConnectFn& connect,
                           const std::function<void(Comm&)>& body) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(store, r, world);
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

// run_comm_ranks over the TCP transport.
inline void run_ranks(int world, const std::function<void(Comm&)>& body,
                      const TcpCommOptions& options = test_options()) {
  run_comm_ranks(
      world,
      [&](std::shared_ptr<Store> store, int r, int w) {
        return connect_tcp_comm(std::move(store), r, w, options);
      },
      body);
}

// A deterministic byte pattern for (seed, index).
inline std::vector<uint8_t> pattern(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(another exception: ") + e.what() + ")";
  }
  return "(no exception)";
}

}  // namespace tdist::transport::testing
