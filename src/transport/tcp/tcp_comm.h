// The TCP transport: a Comm over a full mesh of TCP connections.
//
// connect_tcp_comm() picks the local address (interface.h), builds the mesh through the
// store (mesh.h) and returns a Comm whose traffic runs over `nsocks_per_peer`
// non-blocking sockets per peer (messages striped over them in send order, peer.h). One I/O thread
// per Comm blocks in epoll_wait over all peer sockets: it reads into posted receive buffers and
// flushes sends the kernel could not take at once. Callers do the rest on their own threads: isend
// writes immediately when the peer's queue is empty, and wait() drives its own request (blocks in
// poll() on that peer's socket and reads or writes itself, while the I/O thread stays off that
// socket), so a message arriving wakes the waiting thread directly. Nothing spins.
//
// Ownership: the caller owns the Comm (destroying it stops the I/O thread, tells every
// peer goodbye and closes the sockets; pending requests fail with PeerError). The store
// is used only during connect_tcp_comm. Thread-safety: as comm.h.
// Failure: EOF without goodbye, a reset, or EPOLLERR on any socket aborts the Comm with
// PeerError "rank R: connection to rank P (host:port) lost: ..."; aborting (for any
// reason) sends every peer an abort notice and shuts all sockets down, so the peers abort
// too within milliseconds. A length mismatch fails only that receive with DesyncError
// (the payload is read and dropped; the stream stays usable).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "tdist/settings.h"
#include "tdist/store.h"
#include "transport/comm.h"

namespace tdist::transport {

struct TcpCommOptions {
  // Deadline for the whole connection setup (TimeoutError naming the missing ranks).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // Interfaces to use, NCCL syntax (see interface.h); empty = the route to the store.
  std::string ifname = setting_string("TDIST_SOCKET_IFNAME");
  // SO_SNDBUF/SO_RCVBUF per socket; 0 keeps the kernel's autotuning.
  size_t socket_buffer_bytes = static_cast<size_t>(setting_int("TDIST_SOCKET_BUFFER_BYTES"));
  // TCP connections per pair of ranks (clamped to 1..8); consecutive messages to a peer
  // alternate between them (see peer.h). Every rank must use the same value.
  int nsocks_per_peer = static_cast<int>(setting_int("TDIST_SOCKET_NSOCKS_PERPEER"));
};

// Connects rank `rank` of `size` to every other rank through `store` (namespaced per
// group by the caller). Blocks until the mesh is complete. Throws InvalidArgument for a
// bad rank/size, Error for a TDIST_SOCKET_IFNAME matching no interface, TimeoutError
// when some rank did not connect in time, PeerError when the store fails.
std::unique_ptr<Comm> connect_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const TcpCommOptions& options = {});

}  // namespace tdist::transport
