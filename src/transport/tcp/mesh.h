// Building the TCP transport's full mesh: `nsocks` connected sockets to every other rank.
//
// Only the pairs of ranks this kind of channel serves are connected: `peers` (by rank) says
// which peers of this rank, and every participating rank passes the same `first` (the
// lowest rank that has any TCP peer). Each rank listens on an ephemeral port at
// `local_ip` and publishes "addr/<rank>" = "ip:port" in the store (already namespaced per
// group by the caller); rank `first` also publishes "group_id", a random 64-bit nonce.
// Rank i connects `nsocks` times to every peer j < i and accepts from every peer j > i,
// concurrently (the accepts run on a helper thread).
// Both ends of a connection exchange a hello frame {magic u32, version u16, lane u8,
// nsocks u8, sender u32, receiver u32, group id u64}; a connection whose hello is wrong
// (another program, another group or attempt, a duplicate (rank, lane), another nsocks)
// is closed with a log line and does not count.
// With `tls` (net/tls.h), every connection is a TLS session from its first byte: the
// connecting end is the TLS client, the accepting end the server; the token
// authentication (auth_exchange.h) and the hello run inside it. An end that gets the
// other protocol (TLS vs plain) answers with a TLS refusal (auth_exchange.h) and closes;
// the connecting end then throws AuthError at once, as for a refused certificate.
// Blocking: returns when every peer is connected, or throws TimeoutError at `deadline`
// naming the ranks that never connected and why. Other failures: Error (cannot listen),
// PeerError (the store broke), AuthError (a refused token or certificate, or TLS on one end
// only: retrying cannot cure it). Thread-safe: independent calls may run concurrently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "net/fd.h"
#include "net/tls.h"
#include "tdist/deadline.h"

namespace tdist {
class Store;
}

namespace tdist::transport::tcp {

struct PeerSocket {
  std::vector<net::Fd> fds;  // by lane; blocking mode unspecified; the caller sets it
  // By lane, with TLS: the session over fds[lane], handshake done (null without TLS).
  std::vector<std::unique_ptr<net::tls::Session>> sessions;
  std::string address;  // "host:port" of the peer, for messages
};

// The sockets by peer rank (entries of non-peers and of `rank` stay empty). `tls`: null
// for plain TCP.
std::vector<PeerSocket> build_mesh(Store& store, int rank, int size, const std::vector<bool>& peers,
                                   int first, const std::string& local_ip, size_t nsocks,
                                   const std::shared_ptr<const net::tls::Context>& tls,
                                   Deadline deadline);

}  // namespace tdist::transport::tcp
