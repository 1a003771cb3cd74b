// Lazy TCP connections (TDIST_LAZY_CONNECT): a pair of ranks connects when it first has
// something to exchange, not when the group is made.
//
// Made at group creation, a LazyMesh listens (one ephemeral port for the group), publishes
// "addr/<rank>" and reads its peers' addresses from the store; it connects nobody.
// Each peer's lanes are LazyChannels (core/channel.h's activate/connected): the core
// activates a peer's channels when the first operation for it is posted. The rank that
// activates a pair first dials it (in the background, on the mesh's dialer thread); the
// other accepts (on the mesh's Acceptor thread, acceptor.h, at any time: a dial that comes
// before this rank wants the pair is taken all the same). When both dial at once, the
// higher rank's dial is kept: the lower one's is answered "crossed" (hello_codec.h's
// kCrossedLane) and it waits for the other. Once every lane of a peer is through its
// hello, its channels become ordinary TCP (or TLS) channels and the core's driver is woken
// through the channel's eventfd.
// A group whose algorithms talk to few peers (a ring, a tree, a few neighbours) then
// connects only those, and making the group costs the store exchange alone: this is what
// makes an elastic reconfigure (elastic.h) cost no full mesh connect.
//
// What changes against a full mesh: a rank learns of a peer's death or abort only over a
// connection, so ranks that never exchanged anything with it learn of it when they next
// need it (or from the peers that abort in turn), not at once; and a wrong token or
// certificate shows at a pair's first exchange (PeerError naming the AuthError), not at
// setup.
// Leaving: a rank that destroys its Comm cleanly (Channel::leave, before its goodbyes)
// finishes the connections in the making, so that its goodbye goes over them, and answers
// later dials that it left (hello_codec.h's kLeftLane). A dial so answered, or one that
// finds nothing listening (it published its address only after it began to listen, so the
// peer destroyed its Comm, exited or was killed), finds the peer gone: its channels read as
// departed (channel.h), which the core takes as the peer's goodbye, as a full mesh would
// have read it: a receive from any rank goes on, an exchange with that peer fails
// (PeerError "connection to rank P (tcp ..., never connected: nothing listens at ...)
// lost: it destroyed its Comm ..."), the Comm stays healthy until then.
// Failure: a dial that does not get through by the group's setup timeout, or is refused
// (a wrong token or certificate), fails that peer's channels, which the core reports as
// lost (PeerError "connection to rank P (tcp ..., not connected) lost: never connected:
// ..."). An aborted Comm (shut_down) stops the mesh: it closes its listener and dials no
// more, so a peer that dials it later finds nothing listening: gone, within a second.
// Thread-safety: LazyChannel as core/channel.h; the mesh's own threads touch its state under
// its lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "net/tls.h"
#include "tdist/deadline.h"
#include "transport/core/channel.h"

namespace tdist {
class Store;
}

namespace tdist::transport::tcp {

struct LazyMeshOptions {
  std::string local_ip;
  size_t nsocks = 1;
  size_t socket_buffer_bytes = 0;
  std::shared_ptr<const net::tls::Context> tls;  // null: plain TCP
  // How long one pair may take to connect (the group's setup timeout).
  std::chrono::milliseconds timeout{300000};
};

// The lanes to every peer in `peers` (by rank; the others' entries stay empty), not yet
// connected. Blocks only on the store: this rank's address published, its peers' read (by
// `deadline`: TimeoutError naming the ranks that never published one).
std::vector<std::vector<std::unique_ptr<core::Channel>>> make_lazy_mesh(
    Store& store, int rank, int size, const std::vector<bool>& peers, int first,
    const LazyMeshOptions& options, Deadline deadline);

}  // namespace tdist::transport::tcp
