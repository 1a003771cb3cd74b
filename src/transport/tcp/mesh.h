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

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/auth.h"
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

// How dial_peer retries. Zero: until the deadline, as a full mesh does (a peer may not
// listen yet). Positive (lazy connections, lazy_mesh.h): one connect attempt may take that
// long and a refused or unanswered connect ends the dial (the peer published its address
// after it began to listen, so nothing listening means it is gone); `stop` set ends it too.
// `watch`, when set, is told each connected socket while its handshake runs (then -1),
// so that a stop can shut it down (::shutdown) instead of waiting for the handshake.
struct DialRetry {
  std::chrono::milliseconds connect_timeout{0};
  const std::atomic<bool>* stop = nullptr;
  std::function<void(int fd)> watch;
};

// What dial_peer returns when the peer refused the dial because it dials this rank itself
// (lazy connections: its dial is the one kept).
inline constexpr const char* kCrossedDial = "crossed: the peer dials this rank";
// What dial_peer's answer starts with when the peer is gone (lazy connections): it answered
// that it is destroying its Comm (kLeftLane), or nothing listens at its address any more.
inline constexpr std::string_view kGoneDial = "gone: ";
inline bool is_gone_dial(const std::string& why) { return why.rfind(kGoneDial, 0) == 0; }

// Connects to `peer` (a lower rank in a full mesh), listening at `address`, on every lane
// (TLS, token and hello as above): "" when every lane is in out->fds, else why not.
std::string dial_peer(int rank, int peer, const std::string& address, uint64_t group_id,
                      size_t nsocks, const net::auth::Key& key,
                      const std::shared_ptr<const net::tls::Context>& tls, Deadline deadline,
                      const DialRetry& retry, PeerSocket* out);

// The sockets by peer rank (entries of non-peers and of `rank` stay empty). `tls`: null
// for plain TCP.
std::vector<PeerSocket> build_mesh(Store& store, int rank, int size, const std::vector<bool>& peers,
                                   int first, const std::string& local_ip, size_t nsocks,
                                   const std::shared_ptr<const net::tls::Context>& tls,
                                   Deadline deadline);

}  // namespace tdist::transport::tcp
