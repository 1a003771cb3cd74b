// The TCP kind of channel and connect_tcp_comm.
#include "transport/tcp/tcp_comm.h"

#include <algorithm>

#include "net/interface.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"
#include "transport/core/peer.h"
#include "transport/tcp/channel.h"
#include "transport/tcp/lazy_mesh.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/tls_channel.h"

namespace tdist::transport {
namespace {

constexpr size_t kMaxSocketsPerPeer = 8;

// Where `store` really keeps its keys (through PrefixStores), for the address choice.
net::StoreRoute route_of(Store& store) {
  Store* base = &store;
  while (auto* prefix = dynamic_cast<PrefixStore*>(base)) base = prefix->base().get();
  if (auto* tcp_store = dynamic_cast<TCPStore*>(base)) {
    return {tcp_store->host(), tcp_store->port(), false};
  }
  return {"", 0, dynamic_cast<HashStore*>(base) != nullptr};
}

class TcpKind final : public ChannelKind {
 public:
  explicit TcpKind(const TcpCommOptions& options) : options_(options) {}
  const char* name() const override { return "tcp"; }
  bool can_connect(const std::string&, const std::string&) const override { return true; }
  void prepare(Store& store) override {
    ip_ = net::choose_local_ip(route_of(store), options_.ifname);
  }

  ChannelTable connect(Store& store, int rank, int size, const std::vector<bool>& peers, int first,
                       Deadline deadline) const override {
    const size_t nsocks = static_cast<size_t>(
        std::clamp<int>(options_.nsocks_per_peer, 1, static_cast<int>(kMaxSocketsPerPeer)));
    if (options_.lazy) {
      tcp::LazyMeshOptions lazy{ip_, nsocks, options_.socket_buffer_bytes, options_.tls,
                                deadline.remaining()};
      return tcp::make_lazy_mesh(store, rank, size, peers, first, lazy, deadline);
    }
    auto sockets =
        tcp::build_mesh(store, rank, size, peers, first, ip_, nsocks, options_.tls, deadline);
    ChannelTable table(static_cast<size_t>(size));
    for (int peer = 0; peer < size; ++peer) {
      if (!peers[peer]) continue;
      tcp::PeerSocket& s = sockets[peer];
      for (size_t lane = 0; lane < s.fds.size(); ++lane) {
        if (s.sessions[lane]) {
          table[peer].push_back(
              std::make_unique<tcp::TlsChannel>(std::move(s.fds[lane]), std::move(s.sessions[lane]),
                                                s.address, options_.socket_buffer_bytes));
        } else {
          table[peer].push_back(std::make_unique<tcp::TcpChannel>(std::move(s.fds[lane]), s.address,
                                                                  options_.socket_buffer_bytes));
        }
      }
    }
    return table;
  }

 private:
  TcpCommOptions options_;
  std::string ip_;  // the local address prepare() chose (connect_comm calls it first)
};

}  // namespace

TcpCommOptions TcpCommOptions::from_settings() {
  TcpCommOptions o;
  o.ifname = setting_string("TDIST_SOCKET_IFNAME");
  o.socket_buffer_bytes = static_cast<size_t>(setting_int("TDIST_SOCKET_BUFFER_BYTES"));
  o.nsocks_per_peer = static_cast<int>(setting_int("TDIST_SOCKET_NSOCKS_PERPEER"));
  o.tls = net::tls::Context::from_settings();
  o.lazy = setting_bool("TDIST_LAZY_CONNECT");
  return o;
}

std::unique_ptr<ChannelKind> make_tcp_kind(const TcpCommOptions& options) {
  return std::make_unique<TcpKind>(options);
}

std::unique_ptr<Comm> connect_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const TcpCommOptions& options) {
  ChannelKinds kinds;
  kinds.push_back(make_tcp_kind(options));
  ConnectOptions connect;
  connect.timeout = options.timeout;
  return connect_comm(std::move(store), rank, size, std::move(kinds), connect);
}

}  // namespace tdist::transport
