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
#include "transport/tcp/hello_codec.h"

namespace tdist::transport::tcp {
namespace {

constexpr auto kAcceptPollSlice = std::chrono::milliseconds(50);
constexpr auto kRetryPause = std::chrono::milliseconds(20);
constexpr std::string_view kAuthContext = "tcp-transport";

// Accepts connections from the peers above `rank` on its own thread until all arrived,
// the deadline passed or stop() was called. Every pending connection advances in one poll
// loop: (with TLS) a look at its first bytes and the handshake, (with a token) the
// authentication, then the hello.
class Acceptor {
 public:
  Acceptor(net::Listener listener, int rank, int size, const std::vector<bool>& peers,
           uint64_t group_id, size_t nsocks, const net::auth::Key& key,
           std::shared_ptr<const net::tls::Context> tls, Deadline deadline,
           std::vector<PeerSocket>* sockets)
      : listener_(std::move(listener)),
        key_(key),
        tls_(std::move(tls)),
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
  enum class Step { kSniff, kHandshake, kAuth, kHello };

  struct Pending {
    net::Fd fd;
    std::unique_ptr<net::tls::Session> session;  // with TLS
    Step step = Step::kHello;
    std::optional<AuthResponder> auth;  // with a token: the exchange before the hello
    uint8_t hello[kHelloBytes] = {};
    size_t got = 0;
    short events = POLLIN;  // what to poll for before the next step
    Link link() { return session ? Link(*session) : Link(fd.get()); }
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
      for (const Pending& p : pending) fds.push_back({p.fd.get(), p.events, 0});
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
      Pending p{std::move(fd)};
      if (tls_) {
        try {
          p.session =
              std::make_unique<net::tls::Session>(tls_, p.fd.get(), net::tls::Role::kServer);
        } catch (const Error& e) {
          reject(p, e.what());
          continue;
        }
        p.step = Step::kSniff;
      } else if (key_.enabled()) {
        p.step = Step::kAuth;
      }
      pending->push_back(std::move(p));
    }
  }

  void reject(const Pending& p, const std::string& why) const {
    TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from "
                     << net::SocketAddress::peer_of(p.fd.get()).to_string() << ": " << why;
  }

  // Advances `p` as far as its bytes allow; true when the connection is finished with
  // (kept or rejected).
  bool progress(Pending* p, int* missing) {
    p->events = POLLIN;
    if (p->step == Step::kSniff) {
      // A plain peer is told so in plain bytes, before OpenSSL answers it with an alert.
      uint8_t first[3] = {};
      const ssize_t n = ::recv(p->fd.get(), first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
      if (n <= 0) return true;  // closed before saying anything
      if (n == 3 ? !net::tls::looks_like_tls(first) : first[0] != 0x16) {
        reject(*p, detail::str_cat("it does not use TLS, and this rank does (", net::tls::kTlsHint,
                                   ")"));
        refuse_tls_mismatch(p->fd.get(), kHelloBytes);
        return true;
      }
      p->step = Step::kHandshake;
    }
    if (p->step == Step::kHandshake) {
      const net::tls::Session::Status status = p->session->handshake();
      if (status == net::tls::Session::Status::kWantRead ||
          status == net::tls::Session::Status::kWantWrite) {
        if (status == net::tls::Session::Status::kWantWrite) p->events = POLLOUT;
        return false;
      }
      if (status != net::tls::Session::Status::kOk) {
        reject(*p, detail::str_cat("TLS handshake failed: ", p->session->error(),
                                   p->session->rejected() ? " (" : "",
                                   p->session->rejected() ? net::tls::kTlsHint : "",
                                   p->session->rejected() ? ")" : ""));
        Link(p->fd.get()).close_gently();  // the session is broken: no close_notify
        return true;
      }
      p->step = key_.enabled() ? Step::kAuth : Step::kHello;
    }
    Link link = p->link();
    if (p->step == Step::kAuth) {
      if (!p->auth) p->auth.emplace(key_, kAuthContext, kHelloBytes);
      AuthResponder::State state = p->auth->progress(link, deadline_);
      if (state == AuthResponder::State::kMore) {
        if (p->auth->wants_write()) p->events = POLLOUT;
        return false;
      }
      if (state == AuthResponder::State::kRefused) {
        reject(*p, p->auth->why());
        return true;
      }
      p->step = Step::kHello;  // authenticated: its hello follows
    }
    while (p->got < kHelloBytes) {
      const Link::Io io = link.recv_some(p->hello + p->got, kHelloBytes - p->got);
      if (io.status == Link::Status::kWantRead || io.status == Link::Status::kWantWrite) {
        if (io.status == Link::Status::kWantWrite) p->events = POLLOUT;
        return false;
      }
      if (io.status != Link::Status::kOk) {
        TDIST_LOG(kInfo) << "TCP transport: connection from "
                         << net::SocketAddress::peer_of(p->fd.get()).to_string()
                         << " closed before its hello"
                         << (io.status == Link::Status::kFailed ? ": " + link.error() : "");
        return true;
      }
      p->got += io.bytes;
      if (!link.tls() && p->got >= 3 && net::tls::looks_like_tls(p->hello)) {
        reject(*p,
               detail::str_cat("it uses TLS, and this rank does not (", net::tls::kTlsHint, ")"));
        refuse_tls_mismatch(p->fd.get(), kHelloBytes);
        return true;
      }
    }
    std::string peer = net::SocketAddress::peer_of(p->fd.get()).to_string();
    if (!key_.enabled() && is_auth_hello(p->hello)) {
      refuse_no_token(link);
      reject(*p, detail::str_cat("it authenticates, and this rank has no token (",
                                 net::auth::kTokenHint, ")"));
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
      reject(*p, why);
      return true;
    }
    uint8_t reply[kHelloBytes];
    encode_hello(hello_to(rank_, static_cast<int>(h.route.sender), group_id_, h.lane, nsocks_),
                 reply);
    try {
      link.write_full(reply, kHelloBytes, deadline_, peer);
    } catch (const Error& e) {
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": hello to rank " << h.route.sender
                       << " failed: " << e.what();
      return true;
    }
    PeerSocket& out = (*sockets_)[h.route.sender];
    out.fds[h.lane] = std::move(p->fd);
    out.sessions[h.lane] = std::move(p->session);
    out.address = peer;
    --*missing;
    return true;
  }

  net::Listener listener_;
  const net::auth::Key& key_;
  std::shared_ptr<const net::tls::Context> tls_;
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

// One connection to `peer` on `lane`, through its hello; throws AuthError when retrying
// cannot help, PeerError or TimeoutError when it may, and returns why the hello reply was
// wrong ("" when the connection is made: then in out->fds[lane]).
std::string connect_lane(int rank, int peer, uint64_t group_id, size_t lane, size_t nsocks,
                         const net::auth::Key& key,
                         const std::shared_ptr<const net::tls::Context>& tls,
                         const net::HostPort& hp, Deadline deadline, PeerSocket* out) {
  const std::string& address = out->address;
  net::Fd fd = net::connect_tcp(hp.host, hp.port, deadline);
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
  std::string why = check_hello(reply, group_id, nsocks, rank, peer, peer);
  if (why.empty() && reply.lane != lane) {
    why = detail::str_cat("socket index ", int{reply.lane}, ", expected ", lane);
  }
  if (!why.empty()) return why;
  out->fds[lane] = std::move(fd);
  out->sessions[lane] = std::move(session);
  return {};
}

// Connects to lower rank `peer` on every lane; empty on success, else why it failed
// (deadline passed).
std::string connect_to(Store& store, int rank, int peer, uint64_t group_id, size_t nsocks,
                       const net::auth::Key& key,
                       const std::shared_ptr<const net::tls::Context>& tls, Deadline deadline,
                       PeerSocket* out) {
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
        std::string why =
            connect_lane(rank, peer, group_id, lane, nsocks, key, tls, hp, deadline, out);
        if (why.empty()) break;
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
                                   const std::shared_ptr<const net::tls::Context>& tls,
                                   Deadline deadline) {
  TDIST_CHECK(nsocks >= 1 && nsocks <= 255, InvalidArgument, "TCP transport: ", nsocks,
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
    Acceptor acceptor(std::move(listener), rank, size, peers, group_id, nsocks, key, tls, deadline,
                      &sockets);
    store.set("addr/" + std::to_string(rank), my_address);
    for (int peer = 0; peer < rank; ++peer) {
      if (!peers[peer]) continue;
      std::string why =
          connect_to(store, rank, peer, group_id, nsocks, key, tls, deadline, &sockets[peer]);
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
