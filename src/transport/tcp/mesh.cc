// Full-mesh connection setup through the store, with a hello handshake on every socket
// (inside TLS and after the token authentication when they are on).
#include "transport/tcp/mesh.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "net/address.h"
#include "net/socket.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/store.h"
#include "transport/auth_exchange.h"
#include "transport/connect.h"
#include "transport/link.h"
#include "transport/tcp/acceptor.h"
#include "transport/tcp/hello_codec.h"

namespace tdist::transport::tcp {
namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(20);
constexpr std::string_view kAuthContext = "tcp-transport";

// The full mesh's accepting side: every higher peer of this kind, on every lane.
class MeshSink final : public AcceptSink {
 public:
  MeshSink(int rank, int size, const std::vector<bool>& peers, size_t nsocks,
           std::vector<PeerSocket>* sockets)
      : peers_(peers), sockets_(sockets) {
    for (int peer = rank + 1; peer < size; ++peer) {
      if (peers_[peer]) missing_ += static_cast<int>(nsocks);
    }
  }
  std::string refuse(int peer, size_t lane) override {
    if (!peers_[peer]) {
      return detail::str_cat("rank ", peer, " is reached by another kind of channel");
    }
    if ((*sockets_)[peer].fds[lane])
      return "rank already connected on this socket index (duplicate)";
    return {};
  }
  void take(int peer, size_t lane, net::Fd fd, std::unique_ptr<net::tls::Session> session,
            const std::string& address) override {
    PeerSocket& out = (*sockets_)[peer];
    out.fds[lane] = std::move(fd);
    out.sessions[lane] = std::move(session);
    out.address = address;
    --missing_;
  }
  bool done() override { return missing_ == 0; }

 private:
  const std::vector<bool>& peers_;
  std::vector<PeerSocket>* sockets_;  // written only for peers above this rank
  int missing_ = 0;
};

// One connection to `peer` on `lane`, through its hello; throws AuthError when retrying
// cannot help, PeerError or TimeoutError when it may, and returns why the hello reply was
// wrong ("" when the connection is made: then in out->fds[lane]).
std::string connect_lane(int rank, int peer, uint64_t group_id, size_t lane, size_t nsocks,
                         const net::auth::Key& key,
                         const std::shared_ptr<const net::tls::Context>& tls,
                         const net::HostPort& hp, Deadline connect_deadline, Deadline deadline,
                         const DialRetry& retry, PeerSocket* out) {
  const std::string& address = out->address;
  net::Fd fd = net::connect_tcp(hp.host, hp.port, connect_deadline);
  // Told before the socket can close (declared after it): whoever stops the dial may shut
  // it down meanwhile, which ends a handshake that waits.
  struct Watch {
    const DialRetry& retry;
    Watch(const DialRetry& r, int fd) : retry(r) {
      if (retry.watch) retry.watch(fd);
    }
    ~Watch() {
      if (retry.watch) retry.watch(-1);
    }
  } watch(retry, fd.get());
  const std::string what = detail::str_cat("TCP transport: rank ", peer, " at ", address);
  std::unique_ptr<net::tls::Session> session;
  if (tls) {
    session = std::make_unique<net::tls::Session>(tls, fd.get(), net::tls::Role::kClient);
    net::tls::handshake(*session, deadline, what);
  }
  Link link = session ? Link(*session) : Link(fd.get());
  if (key.enabled()) authenticate_initiator(link, key, kAuthContext, deadline, what);
  uint8_t hello[kHelloBytes];
  encode_hello(hello_to(rank, peer, group_id, lane, nsocks), hello);
  const std::string& peer_name = tls ? what : address;  // TLS errors need the context
  link.write_full(hello, kHelloBytes, deadline, peer_name);
  link.read_full(hello, kHelloBytes, deadline, peer_name);
  if (is_tls_refusal(hello) || (!tls && net::tls::looks_like_tls(hello))) {
    TDIST_THROW(AuthError, what, " uses TLS, and this process does not (", net::tls::kTlsHint, ")");
  }
  if (is_refusal(hello)) {
    TDIST_THROW(AuthError, what, " requires authentication, and this process has no token (",
                net::auth::kTokenHint, ")");
  }
  Hello reply = decode_hello(hello);
  if (reply.lane == kCrossedLane || reply.lane == kLeftLane) {
    Hello checked = reply;
    checked.lane = 0;
    if (check_hello(checked, group_id, nsocks, rank, peer, peer).empty()) {
      if (reply.lane == kCrossedLane) return kCrossedDial;
      return detail::str_cat(kGoneDial, "rank ", peer,
                             " destroyed its Comm as this rank dialled it");
    }
  }
  std::string why = check_hello(reply, group_id, nsocks, rank, peer, peer);
  if (why.empty() && reply.lane != lane) {
    why = detail::str_cat("socket index ", int{reply.lane}, ", expected ", lane);
  }
  if (!why.empty()) return why;
  out->fds[lane] = std::move(fd);
  out->sessions[lane] = std::move(session);
  return {};
}

}  // namespace

std::string dial_peer(int rank, int peer, const std::string& address, uint64_t group_id,
                      size_t nsocks, const net::auth::Key& key,
                      const std::shared_ptr<const net::tls::Context>& tls, Deadline deadline,
                      const DialRetry& retry, PeerSocket* out) {
  net::HostPort hp = net::parse_host_port(address);
  out->address = address;
  for (size_t lane = 0; lane < nsocks; ++lane) {
    std::string last_error;
    while (!out->fds[lane] && !deadline.expired()) {
      if (retry.stop != nullptr && retry.stop->load()) return "this rank stopped connecting";
      const Deadline attempt =
          retry.connect_timeout.count() > 0
              ? Deadline::earliest(deadline, Deadline::after(retry.connect_timeout))
              : deadline;
      try {
        std::string why = connect_lane(rank, peer, group_id, lane, nsocks, key, tls, hp, attempt,
                                       deadline, retry, out);
        if (why.empty()) break;
        if (why == kCrossedDial || is_gone_dial(why)) return why;
        last_error = "bad hello reply: " + why;
        TDIST_LOG(kWarn) << "TCP transport rank " << rank << ": " << address << " (rank " << peer
                         << "): " << last_error;
      } catch (const TimeoutError& e) {
        last_error = e.what();
        // Nothing listens there any more: the peer is gone (a lazy dial comes only after the
        // peer published its address, so its listener was up).
        if (retry.connect_timeout.count() > 0 &&
            std::string_view(e.what()).find("could not connect") != std::string_view::npos) {
          return detail::str_cat(
              kGoneDial, "nothing listens at ", address,
              " any more (the peer destroyed its Comm, exited or was killed): ", last_error);
        }
      } catch (const PeerError& e) {
        last_error = e.what();  // e.g. the listener rejected us as a duplicate; retry
      }
      std::this_thread::sleep_for(kRetryPause);
    }
    if (!out->fds[lane]) return "no connection to " + address + ": " + last_error;
  }
  return {};
}

std::vector<PeerSocket> build_mesh(Store& store, int rank, int size, const std::vector<bool>& peers,
                                   int first, const std::string& local_ip, size_t nsocks,
                                   const std::shared_ptr<const net::tls::Context>& tls,
                                   Deadline deadline) {
  TDIST_CHECK(nsocks >= 1 && nsocks <= kLeftLane, InvalidArgument, "TCP transport: ", nsocks,
              " sockets per peer is out of range");
  std::vector<PeerSocket> sockets(static_cast<size_t>(size));
  for (PeerSocket& s : sockets) {
    s.fds.resize(nsocks);
    s.sessions.resize(nsocks);
  }
  if (size <= 1) return sockets;
  const auto start = Clock::now();
  uint64_t group_id = group_nonce(store, "group_id", rank == first, deadline);
  const net::auth::Key key = net::auth::Key::from_settings();
  net::Listener listener = net::listen_tcp(local_ip, 0);
  std::string my_address = net::format_host_port(local_ip, listener.port());
  std::map<int, std::string> failures;
  {
    MeshSink sink(rank, size, peers, nsocks, &sockets);
    Acceptor acceptor(std::move(listener), rank, size, rank + 1, group_id, nsocks, key, tls,
                      deadline, std::chrono::milliseconds::zero(), &sink);
    store.set("addr/" + std::to_string(rank), my_address);
    for (int peer = 0; peer < rank; ++peer) {
      if (!peers[peer]) continue;
      std::string address;
      try {
        address = to_string(store.get("addr/" + std::to_string(peer), deadline));
      } catch (const TimeoutError&) {
        failures[peer] = "it never published its address in the store";
        continue;
      }
      std::string why =
          dial_peer(rank, peer, address, group_id, nsocks, key, tls, deadline, {}, &sockets[peer]);
      if (!why.empty()) failures[peer] = why;
    }
    acceptor.finish();
  }
  for (int peer = rank + 1; peer < size; ++peer) {
    if (!peers[peer]) continue;
    for (const net::Fd& fd : sockets[peer].fds) {
      if (!fd) failures[peer] = "it never connected to " + my_address;
    }
  }
  if (failures.empty()) return sockets;
  throw_setup_timeout(rank, size, "TCP transport setup", failures, start);
}

}  // namespace tdist::transport::tcp
