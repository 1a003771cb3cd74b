// Runs the Store conformance suite against TCPStore over mutual TLS: create() starts a
// server inside the returned client (is_server, TlsFiles of a test CA), connect() opens
// another TLS client to it, from this process or its threads.
#include <cstdint>
#include <memory>

#include "store/conformance.h"
#include "support/test_certs.h"
#include "tdist/tcp_store.h"

namespace tdist_test {
namespace {

using tdist::Store;
using tdist::TCPStore;
using tdist::TCPStoreOptions;

// One CA and certificate for the whole binary (removed at exit).
tdist::TlsFiles tls_files() {
  static tdist::testing::TestPki pki;
  static const tdist::net::tls::Config config = pki.config("member");
  return {config.cert, config.key, config.ca};
}

TCPStoreOptions tls_options(uint16_t port) {
  TCPStoreOptions o;
  o.port = port;
  o.connect_timeout = std::chrono::seconds(10);
  o.tls = tls_files();
  o.auth_token = "";
  return o;
}

StoreFactory tls_factory() {
  auto port = std::make_shared<uint16_t>(0);
  auto create = [port]() -> std::shared_ptr<Store> {
    TCPStoreOptions o = tls_options(0);
    o.is_server = true;
    auto server = std::make_shared<TCPStore>("127.0.0.1", o);
    *port = server->port();
    return server;
  };
  auto connect = [port]() -> std::shared_ptr<Store> {
    return std::make_shared<TCPStore>("127.0.0.1", tls_options(*port));
  };
  return {"TLS", create, connect, nullptr};
}

INSTANTIATE_TEST_SUITE_P(TLS, StoreConformance, ::testing::Values(tls_factory()),
                         StoreFactoryName());
// Not StoreCrossProcess: it forks children while this process's server thread runs
// handshakes, and a child can inherit a lock that libssl held at that moment, then hang on
// its own first handshake (fork without exec is unsafe in a process whose threads use
// OpenSSL). Clients in other processes over TLS are covered by tcp_tls_test and
// multihost_auto_test, whose processes are started before any TLS runs.

}  // namespace
}  // namespace tdist_test
