// NodeRendezvous's store: hosting (c10d) or finding the TCPStore, or opening the EtcdStore
// (etcd-v2), and the guard that names a lost store.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "net/address.h"
#include "net/fd.h"
#include "net/interface.h"
#include "tdist/error.h"
#include "tdist/etcd_store.h"
#include "tdistrun/node_rdzv.h"
#include "tdistrun/store_loss.h"

namespace tdist::launcher {
namespace {

using std::chrono::milliseconds;

// How long an etcd agent retries connecting to etcd before its calls fail (join_timeout, if
// shorter).
constexpr milliseconds kEtcdConnectWindow{30'000};

// True when `host` names one of this machine's (network namespace's) addresses. A name that
// does not resolve is not local: connecting to it then fails with the resolver's message.
bool is_local_address(const std::string& host) {
  std::vector<net::SocketAddress> resolved;
  try {
    resolved = net::resolve(host, 0, /*passive=*/false);
  } catch (const Error&) {
    return false;
  }
  std::set<std::string> local;
  for (const auto& a : net::list_interfaces()) {
    local.insert(a.ip.substr(0, a.ip.find('%')));  // inet_ntop's text, without the scope
  }
  return std::any_of(resolved.begin(), resolved.end(), [&](const net::SocketAddress& a) {
    return a.is_loopback() || local.count(a.ip()) > 0;
  });
}

// Loopback endpoints are served on loopback only; any other address on every address of its
// family, so that nodes reach the store whichever of this machine's addresses their name
// for it resolves to.
std::string listen_host(const std::string& host) {
  std::vector<net::SocketAddress> resolved = net::resolve(host, 0, /*passive=*/false);
  if (resolved.front().is_loopback()) return resolved.front().ip();
  return resolved.front().family() == AF_INET6 ? "::" : "0.0.0.0";
}

// Whether binding host:port fails with EADDRINUSE (a failed server start for another reason
// must surface as it is).
bool port_taken(const std::string& host, uint16_t port) {
  if (port == 0) return false;
  for (const net::SocketAddress& address : net::resolve(host, port, /*passive=*/true)) {
    net::Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), address.get(), address.length) != 0 && errno == EADDRINUSE) return true;
  }
  return false;
}

}  // namespace

// c10d: hosts the TCPStore when this agent is the host, and connects to it.
void NodeRendezvous::host_store() {
  const NodeRdzvConfig& c = config_;
  if (c.is_host.value_or(c.port == 0 || is_local_address(c.host))) {
    std::string bind_host = listen_host(c.host);
    try {
      server_ = TCPStoreServer::start(bind_host, c.port);
    } catch (const Error&) {
      if (!port_taken(bind_host, c.port)) throw;
      // Unset is_host: another agent of this machine may host, and this one joins it;
      // a one-node job has no other agent, so the port is someone else's.
      TDIST_CHECK(!c.is_host.value_or(c.max_nodes == 1), Error, "port ", c.port, " on ", c.host,
                  " is in use; choose a free --master-port/--rdzv-endpoint port, or leave it out");
    }
  }
  port_ = server_ ? server_->port() : c.port;
  TDIST_CHECK(port_ != 0, InvalidArgument, "rendezvous endpoint ", c.host,
              ":0 names no port, which only the node hosting the store may leave open");
  store_ = std::make_shared<TCPStore>(
      c.host, TCPStoreOptions{.port = port_, .connect_timeout = c.join_timeout});
}

std::string NodeRendezvous::worker_store() const {
  const std::string endpoint = net::format_host_port(config_.host, port_);
  return config_.etcd ? "etcd://" + endpoint : endpoint;
}

void NodeRendezvous::open_store() {
  const NodeRdzvConfig& c = config_;
  if (c.etcd) {
    TDIST_CHECK(c.port != 0, InvalidArgument, "rendezvous on etcd at ", c.host,
                " needs etcd's client port (--rdzv-endpoint HOST:PORT)");
    port_ = c.port;
    key_prefix_ = detail::str_cat("/tdist/", c.run_id, "/");
    store_ = std::make_shared<EtcdStore>(c.host, port_, key_prefix_, kDefaultStoreTimeout,
                                         std::min(c.join_timeout, kEtcdConnectWindow));
  } else {
    host_store();
  }
  store_ = std::make_shared<StoreLossGuard>(
      std::move(store_),
      detail::str_cat("the rendezvous store ", c.etcd ? "(etcd) " : "", "at ",
                      net::format_host_port(c.host, port_)),
      c.etcd ? "etcd must outlive the job"
             : "the agent hosting it (the node at that address) has probably died; "
               "run with --rdzv-backend etcd-v2 --rdzv-endpoint <etcd host:port> to keep a job "
               "alive when a node is lost");
}

}  // namespace tdist::launcher
