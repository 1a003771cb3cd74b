// The Comm factories the conformance suite (comm_conformance_*_test.cc) runs against:
// one named entry per way of building a Comm. Every case of the suite runs once per
// entry, named by it (e.g. comm_conformance_test.Transports/CommConformanceTest.X/shm).
// To add a transport, add one entry to comm_factories(). Test-only; a binary that includes
// it links OpenSSL::SSL and OpenSSL::Crypto (the tcp_tls entry's test certificates).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "comm_test_util.h"
#include "net/tls.h"
#include "support/test_certs.h"
#include "tdist/prefix_store.h"
#include "tdist/store.h"
#include "transport/comm.h"
#include "transport/connect.h"
#include "transport/context_comm.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::transport::testing {

// The default ring size of the cases (CommTestOptions::ring_bytes).
inline constexpr size_t kTestRingBytes = 64 * 1024;

// What a case may ask of the Comm it gets, besides rank and size. A factory maps these
// onto its transport's options and ignores what does not apply to it.
struct CommTestOptions {
  // Deadline for the whole connection setup.
  std::chrono::milliseconds setup_timeout = kSetupTimeout;
  // Bytes of each shared-memory ring (unused where nothing is shared): small, so that
  // modest messages wrap and stream, and messages of a few rings arrive unexpected.
  size_t ring_bytes = kTestRingBytes;
};

// Builds rank `rank` of `size` through `store` (fresh per group; the same for every rank,
// possibly in another process on this host).
using CommFactoryFn = std::unique_ptr<Comm> (*)(std::shared_ptr<Store> store, int rank, int size,
                                                const CommTestOptions& options);

struct CommFactory {
  std::string name;  // the case name suffix: letters, digits and '_' only
  CommFactoryFn connect;
};

inline void PrintTo(const CommFactory& f, std::ostream* os) { *os << f.name; }

// The TLS context of the tcp_tls entry: a certificate of a test CA, made once per process
// (comm_factories() makes it before any case forks ranks, so they all share the CA); the
// files are removed at exit.
inline const std::shared_ptr<const net::tls::Context>& test_tls_context() {
  static tdist::testing::TestPki pki;
  static const std::shared_ptr<const net::tls::Context> context =
      net::tls::Context::get(pki.config("member"));
  return context;
}

// Shared memory and TCP in one Comm: ranks {0,1}, {2,3}, ... get fake host keys of their
// own "host" (shm inside it, tcp between them).
inline std::unique_ptr<Comm> mixed_comm(std::shared_ptr<Store> store, int rank, int size,
                                        const CommTestOptions& o) {
  ShmCommOptions shm;
  shm.ring_bytes = o.ring_bytes;
  ChannelKinds kinds;
  kinds.push_back(make_shm_kind(shm));
  kinds.push_back(make_tcp_kind(TcpCommOptions{}));
  ConnectOptions options;
  options.timeout = o.setup_timeout;
  options.host_key = "test-host-" + std::to_string(rank / 2);
  return connect_comm(std::move(store), rank, size, std::move(kinds), options);
}

// Every transport of the suite.
inline const std::vector<CommFactory>& comm_factories() {
  test_tls_context();
  static const std::vector<CommFactory> factories = {
      {"tcp",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         TcpCommOptions options;
         options.timeout = o.setup_timeout;
         options.tls = nullptr;
         return connect_tcp_comm(std::move(store), rank, size, options);
       }},
      // TCP with mutual TLS (tls_channel.h).
      {"tcp_tls",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         TcpCommOptions options;
         options.timeout = o.setup_timeout;
         options.tls = test_tls_context();
         return connect_tcp_comm(std::move(store), rank, size, options);
       }},
      // TCP whose pairs connect at their first exchange (tcp/lazy_mesh.h).
      {"tcp_lazy",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         TcpCommOptions options;
         options.timeout = o.setup_timeout;
         options.tls = nullptr;
         options.lazy = true;
         return connect_tcp_comm(std::move(store), rank, size, options);
       }},
      {"shm",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         ShmCommOptions options;
         options.timeout = o.setup_timeout;
         options.ring_bytes = o.ring_bytes;
         return connect_shm_comm(std::move(store), rank, size, options);
       }},
      {"mixed",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         return mixed_comm(std::move(store), rank, size, o);
       }},
      // The mixed Comm seen through a ContextComm of all its ranks (context_comm.h): what
      // a group split from another one gets; every tag carries its context.
      {"mixed_context",
       [](std::shared_ptr<Store> store, int rank, int size, const CommTestOptions& o) {
         std::shared_ptr<Comm> parent = mixed_comm(store, rank, size, o);
         std::vector<int> members(static_cast<size_t>(size));
         for (int r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
         PrefixStore split("split", store);
         return make_context_comm(parent, members, split, Deadline::after(o.setup_timeout));
       }},
  };
  return factories;
}

// run_comm_ranks (comm_test_util.h) over `factory`'s Comms.
inline void run_factory_ranks(const CommFactory& factory, int world,
                              const std::function<void(Comm&)>& body,
                              const CommTestOptions& options = {}) {
  run_comm_ranks(
      world,
      [&](std::shared_ptr<Store> store, int r, int w) {
        return factory.connect(std::move(store), r, w, options);
      },
      body);
}

}  // namespace tdist::transport::testing
