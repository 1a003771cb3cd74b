// Runs the Store conformance suite against TCPStore: create() starts a server on port 0
// inside the returned client (is_server); connect() opens another client to that port,
// from this process, its threads or a forked child (a fresh connection each time). Also
// runs it through a PrefixStore over TCPStore clients.
#include <cstdint>
#include <memory>

#include "store/conformance.h"
#include "tdist/prefix_store.h"
#include "tdist/tcp_store.h"

namespace tdist_test {
namespace {

using tdist::Store;
using tdist::TCPStore;
using tdist::TCPStoreOptions;

TCPStoreOptions client_options(uint16_t port) {
  TCPStoreOptions o;
  o.port = port;
  o.connect_timeout = std::chrono::seconds(10);
  return o;
}

// `wrap` turns a TCPStore client into the store under test.
StoreFactory tcp_factory(std::string name,
                         std::function<std::shared_ptr<Store>(std::shared_ptr<Store>)> wrap) {
  auto port = std::make_shared<uint16_t>(0);
  auto create = [port, wrap] {
    TCPStoreOptions o = client_options(0);
    o.is_server = true;
    auto server = std::make_shared<TCPStore>("127.0.0.1", o);
    *port = server->port();
    return wrap(server);
  };
  auto connect = [port, wrap] {
    return wrap(std::make_shared<TCPStore>("127.0.0.1", client_options(*port)));
  };
  return {std::move(name), create, connect, nullptr};
}

std::vector<StoreFactory> tcp_factories() {
  return {tcp_factory("TCP", [](std::shared_ptr<Store> s) { return s; }),
          tcp_factory("PrefixOverTCP", [](std::shared_ptr<Store> s) {
            return std::make_shared<tdist::PrefixStore>("job", std::move(s));
          })};
}

INSTANTIATE_TEST_SUITE_P(TCP, StoreConformance, ::testing::ValuesIn(tcp_factories()),
                         StoreFactoryName());
INSTANTIATE_TEST_SUITE_P(TCP, StoreCrossProcess, ::testing::ValuesIn(tcp_factories()),
                         StoreFactoryName());

}  // namespace
}  // namespace tdist_test
