// Full-mesh connection setup through the store, with a hello handshake on every socket.
#include "transport/tcp/mesh.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
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
#include "transport/tcp/hello_codec.h"

namespace tdist::transport::tcp {
namespace {

constexpr auto kAcceptPollSlice = std::chrono::milliseconds(50);
constexpr auto kRetryPause = std::chrono::milliseconds(20);
constexpr std::string_view kAuthContext = "tcp-transport";

// Accepts connections from the peers above `rank` on its own thread until all arrived,
// the deadline passed or stop() was called.
class Acceptor {
 public:
  Acceptor(net::Listener listener, int rank, int size, const std::vector<bool>& peers,
           uint64_t group_id, size_t nsocks, const net::auth::Key& key, Deadline deadline,
           std::vector<PeerSocket>* sockets)
      : listener_(std::move(listener)),
        key_(key),
        rank_(rank),
        size_(size),
        peers_(peers),
        group_id_(group_id),
        nsocks_(nsocks),
        deadline_(deadline),
        sockets_(sockets) {
    thread_ = std::thread([this] { run(); });
  }
  ~Acceptor() {
    stop_ = true;
    finish();
  }

  // Waits until every higher rank connected or the deadline passed.
  void finish() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Pending {
    net::Fd fd;
    std::optional<AuthResponder> auth;  // with a token: the exchange before the hello
    bool authenticated = false;
    uint8_t hello[kHelloBytes] = {};
    size_t got = 0;
  };

  void run() {
    int missing = 0;
    for (int peer = rank_ + 1; peer < size_; ++peer) {
      if (peers_[peer]) missing += static_cast<int>(nsocks_);
    }
    std::vector<Pending> pending;
    while (missing > 0 && !stop_ && !deadline_.expired()) {
      std::vector<pollfd> fds;
      fds.push_back({listener_.fd.get(), POLLIN, 0});
      for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
      Deadline slice = Deadline::earliest(deadline_, Deadline::after(kAcceptPollSlice));
      if (::poll(fds.data(), fds.size(), slice.poll_timeout_ms()) <= 0) continue;
      if (fds[0].revents != 0) accept_all(&pending);
      for (size_t i = pending.size(); i-- > 0;) {
        if (fds.size() <= i + 1 || fds[i + 1].revents == 0) continue;
        if (progress(&pending[i], &missing)) pending.erase(pending.begin() + i);
      }
    }
  }

  void accept_all(std::vector<Pending>* pending) {
    while (true) {
      int error = 0;
      net::Fd fd = net::accept_tcp(listener_.fd.get(), &error);
      if (!fd) {
        if (error != 0) {
          TDIST_LOG(kWarn) << "TCP transport: accept failed: " << net::errno_text(error);
        }
        return;
      }
      pending->push_back(Pending{std::move(fd)});
    }
  }

  // Reads hello bytes; true when the connection is finished with (kept or rejected).
  bool progress(Pending* p, int* missing) {
    if (key_.enabled() && !p->authenticated) {
      if (!p->auth) p->auth.emplace(key_, kAuthContext, kHelloBytes);
      AuthResponder::State state = p->auth->progress(p->fd.get(), deadline_);
      if (state == AuthResponder::State::kMore) return false;
      if (state == AuthResponder::State::kRefused) {
        TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from "
                         << net::SocketAddress::peer_of(p->fd.get()).to_string() << ": "
                         << p->auth->why();
        return true;
      }
      p->authenticated = true;  // its hello follows
    }
    ssize_t n = ::recv(p->fd.get(), p->hello + p->got, kHelloBytes - p->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    std::string peer = net::SocketAddress::peer_of(p->fd.get()).to_string();
    if (n <= 0) {
      TDIST_LOG(kInfo) << "TCP transport: connection from " << peer << " closed before its hello";
      return true;
    }
    p->got += static_cast<size_t>(n);
    if (p->got < kHelloBytes) return false;
    if (!key_.enabled() && is_auth_hello(p->hello)) {
      refuse_no_token(p->fd.get());
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from " << peer
                       << ": it authenticates, and this rank has no token ("
                       << net::auth::kTokenHint << ")";
      return true;
    }
    Hello h = decode_hello(p->hello);
    std::string why = check_hello(h, group_id_, nsocks_, rank_, rank_ + 1, size_ - 1);
    if (why.empty() && !peers_[h.route.sender]) {
      why = detail::str_cat("rank ", h.route.sender, " is reached by another kind of channel");
    }
    if (why.empty() && (*sockets_)[h.route.sender].fds[h.lane]) {
      why = "rank already connected on this socket index (duplicate)";
    }
    if (!why.empty()) {
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from " << peer
                       << ": " << why;
      return true;
    }
    uint8_t reply[kHelloBytes];
    encode_hello(hello_to(rank_, static_cast<int>(h.route.sender), group_id_, h.lane, nsocks_),
                 reply);
    try {
      net::write_full(p->fd.get(), reply, kHelloBytes, deadline_, peer);
    } catch (const Error& e) {
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": hello to rank " << h.route.sender
                       << " failed: " << e.what();
      return true;
    }
    (*sockets_)[h.route.sender].fds[h.lane] = std::move(p->fd);
    (*sockets_)[h.route.sender].address = peer;
    --*missing;
    return true;
  }

  net::Listener listener_;
  const net::auth::Key& key_;
  int rank_;
  int size_;
  std::vector<bool> peers_;
  uint64_t group_id_;
  size_t nsocks_;
  Deadline deadline_;
  std::vector<PeerSocket>* sockets_;  // the acceptor writes only entries > rank_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Connects to lower rank `peer` on every lane; empty on success, else why it failed
// (deadline passed).
std::string connect_to(Store& store, int rank, int peer, uint64_t group_id, size_t nsocks,
                       const net::auth::Key& key, Deadline deadline, PeerSocket* out) {
  std::string address;
  try {
    address = to_string(store.get("addr/" + std::to_string(peer), deadline));
  } catch (const TimeoutError&) {
    return "it never published its address in the store";
  }
  net::HostPort hp = net::parse_host_port(address);
  out->address = address;
  for (size_t lane = 0; lane < nsocks; ++lane) {
    std::string last_error;
    while (!out->fds[lane] && !deadline.expired()) {
      try {
        net::Fd fd = net::connect_tcp(hp.host, hp.port, deadline);
        const std::string what = detail::str_cat("TCP transport: rank ", peer, " at ", address);
        if (key.enabled()) authenticate_initiator(fd.get(), key, kAuthContext, deadline, what);
        uint8_t hello[kHelloBytes];
        encode_hello(hello_to(rank, peer, group_id, lane, nsocks), hello);
        net::write_full(fd.get(), hello, kHelloBytes, deadline, address);
        net::read_full(fd.get(), hello, kHelloBytes, deadline, address);
        if (is_refusal(hello)) {
          TDIST_THROW(AuthError, what, " requires authentication, and this process has no token (",
                      net::auth::kTokenHint, ")");
        }
        Hello reply = decode_hello(hello);
        std::string why = check_hello(reply, group_id, nsocks, rank, peer, peer);
        if (why.empty() && reply.lane != lane) {
          why = detail::str_cat("socket index ", int{reply.lane}, ", expected ", lane);
        }
        if (why.empty()) {
          out->fds[lane] = std::move(fd);
          break;
        }
        last_error = "bad hello reply: " + why;
        TDIST_LOG(kWarn) << "TCP transport rank " << rank << ": " << address << " (rank " << peer
                         << "): " << last_error;
      } catch (const TimeoutError& e) {
        last_error = e.what();
      } catch (const PeerError& e) {
        last_error = e.what();  // e.g. the listener rejected us as a duplicate; retry
      }
      std::this_thread::sleep_for(kRetryPause);
    }
    if (!out->fds[lane]) return "no connection to " + address + ": " + last_error;
  }
  return {};
}

}  // namespace

std::vector<PeerSocket> build_mesh(Store& store, int rank, int size, const std::vector<bool>& peers,
                                   int first, const std::string& local_ip, size_t nsocks,
                                   Deadline deadline) {
  TDIST_CHECK(nsocks >= 1 && nsocks <= 255, InvalidArgument, "TCP transport: ", nsocks,
              " sockets per peer is out of range");
  std::vector<PeerSocket> sockets(static_cast<size_t>(size));
  for (PeerSocket& s : sockets) s.fds.resize(nsocks);
  if (size <= 1) return sockets;
  const auto start = Clock::now();
  uint64_t group_id = group_nonce(store, "group_id", rank == first, deadline);
  const net::auth::Key key = net::auth::Key::from_settings();
  net::Listener listener = net::listen_tcp(local_ip, 0);
  std::string my_address = net::format_host_port(local_ip, listener.port());
  std::map<int, std::string> failures;
  {
    Acceptor acceptor(std::move(listener), rank, size, peers, group_id, nsocks, key, deadline,
                      &sockets);
    store.set("addr/" + std::to_string(rank), my_address);
    for (int peer = 0; peer < rank; ++peer) {
      if (!peers[peer]) continue;
      std::string why =
          connect_to(store, rank, peer, group_id, nsocks, key, deadline, &sockets[peer]);
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
