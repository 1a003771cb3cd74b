// The TCP transport: channels (channel.h) over TCP sockets, for peers on any host.
//
// Setup picks the local address (interface.h) and builds the connections through the
// store (mesh.h; with `lazy`, lazy_mesh.h: each pair when it first talks): `nsocks_per_peer`
// non-blocking sockets per peer, over which the core
// stripes whole messages (core/peer.h). With `tls` (by default from TDIST_TLS_CERT/KEY/CA,
// net/tls.h), every connection is mutual TLS from its first byte (tls_channel.h); every
// rank must then use TLS, with certificates of the same CA. connect_tcp_comm() returns a
// Comm whose every peer is reached over TCP (the `tcp` backend); make_tcp_kind() is the
// kind the `auto` backend uses for peers that no better kind reaches (connect.h).
//
// Ownership: the caller owns the Comm (destroying it says goodbye to every peer and closes
// the sockets; pending requests fail with PeerError). The store is used only during
// setup (lazy connections too: they read the addresses then). Thread-safety: as comm.h.
// Failure: a refused certificate, or TLS on some ranks only, fails the setup at once with
// AuthError (on the rank that connects; the other one waits, as for a refused token).
// EOF without goodbye, a reset or a write error on any socket aborts the Comm with
// PeerError "rank R: connection to rank P (tcp host:port) lost: ..."; aborting (for any
// reason) sends every peer an abort notice and shuts all sockets down, so the peers abort
// too within milliseconds of waiting on them. A length mismatch fails only that
// receive with DesyncError (the payload is read and dropped; the stream stays usable).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "net/tls.h"
#include "tdist/store.h"
#include "transport/comm.h"
#include "transport/connect.h"

namespace tdist::transport {

// The defaults are the settings' declared ones; from_settings() resolves the environment
// (TDIST_SOCKET_IFNAME, TDIST_SOCKET_BUFFER_BYTES, TDIST_SOCKET_NSOCKS_PERPEER, TDIST_TLS_*,
// TDIST_LAZY_CONNECT)
// once, where a group is made.
struct TcpCommOptions {
  // Deadline for the whole connection setup (TimeoutError naming the missing ranks).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // Interfaces to use, NCCL syntax (net/interface.h); empty = the route to the store.
  std::string ifname;
  // SO_SNDBUF/SO_RCVBUF per socket; 0 keeps the kernel's autotuning.
  size_t socket_buffer_bytes = size_t{4} << 20;
  // TCP connections per pair of ranks (clamped to 1..8); consecutive messages to a peer
  // alternate between them (see peer.h). Every rank must use the same value.
  int nsocks_per_peer = 2;
  // Mutual TLS for every connection (the same on every rank); null = plain TCP.
  std::shared_ptr<const net::tls::Context> tls;
  // Each pair connects at its first exchange (lazy_mesh.h), not at setup; the same on
  // every rank (TDIST_LAZY_CONNECT).
  bool lazy = false;

  // The environment's values (InvalidArgument naming a bad one).
  static TcpCommOptions from_settings();
};

// Connects rank `rank` of `size` to every other rank through `store` (namespaced per
// group by the caller). Blocks until the mesh is complete. Throws InvalidArgument for a
// bad rank/size, Error for a TDIST_SOCKET_IFNAME matching no interface, TimeoutError
// when some rank did not connect in time, PeerError when the store fails, AuthError as
// above.
std::unique_ptr<Comm> connect_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const TcpCommOptions& options = {});

// The TCP kind of channel (connect.h): reaches every peer. `options.timeout` is unused
// (connect_comm has the deadline).
std::unique_ptr<ChannelKind> make_tcp_kind(const TcpCommOptions& options);

}  // namespace tdist::transport
