// The accepting side of the TCP transport's connection setup (full mesh or lazy).
#include "transport/tcp/acceptor.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>
#include <string_view>
#include <vector>

#include "net/address.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "transport/auth_exchange.h"
#include "transport/link.h"
#include "transport/tcp/hello_codec.h"

namespace tdist::transport::tcp {
namespace {

constexpr auto kAcceptPollSlice = std::chrono::milliseconds(50);

}  // namespace

enum class Step { kSniff, kHandshake, kAuth, kHello };

struct Acceptor::Pending {
  net::Fd fd;
  Deadline deadline = Deadline::never();       // the end of this connection's setup
  std::unique_ptr<net::tls::Session> session;  // with TLS
  Step step = Step::kHello;
  std::optional<AuthResponder> auth;  // with a token: the exchange before the hello
  uint8_t hello[kHelloBytes] = {};
  size_t got = 0;
  short events = POLLIN;  // what to poll for before the next step
  Link link() { return session ? Link(*session) : Link(fd.get()); }
};

Acceptor::Acceptor(net::Listener listener, int rank, int size, int lowest_sender, uint64_t group_id,
                   size_t nsocks, const net::auth::Key& key,
                   std::shared_ptr<const net::tls::Context> tls, Deadline deadline,
                   std::chrono::milliseconds handshake_timeout, AcceptSink* sink)
    : listener_(std::move(listener)),
      key_(key),
      tls_(std::move(tls)),
      rank_(rank),
      size_(size),
      lowest_sender_(lowest_sender),
      group_id_(group_id),
      nsocks_(nsocks),
      deadline_(deadline),
      handshake_timeout_(handshake_timeout),
      sink_(sink) {
  thread_ = std::thread([this] { run(); });
}

Acceptor::~Acceptor() { stop(); }

void Acceptor::finish() {
  if (thread_.joinable()) thread_.join();
}

void Acceptor::stop() {
  stop_ = true;
  finish();
  listener_.fd.reset();
}

void Acceptor::run() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!stop_ && !sink_->done() && !deadline_.expired()) {
    fds.clear();
    fds.push_back({listener_.fd.get(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd.get(), p.events, 0});
    Deadline slice = Deadline::earliest(deadline_, Deadline::after(kAcceptPollSlice));
    const int n = ::poll(fds.data(), fds.size(), slice.poll_timeout_ms());
    const size_t polled = pending.size();
    if (n > 0 && fds[0].revents != 0) accept_all(&pending);
    for (size_t i = polled; i-- > 0;) {
      const bool ready = n > 0 && fds[i + 1].revents != 0;
      if (!ready && !pending[i].deadline.expired()) continue;
      if (!ready) {
        reject(pending[i], "its setup did not finish in time");
      } else if (!progress(&pending[i])) {
        continue;
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  listener_.fd.reset();  // later connections are refused
}

void Acceptor::accept_all(std::vector<Pending>* pending) {
  while (true) {
    int error = 0;
    net::Fd fd = net::accept_tcp(listener_.fd.get(), &error);
    if (!fd) {
      if (error != 0) {
        TDIST_LOG(kWarn) << "TCP transport: accept failed: " << net::errno_text(error);
      }
      return;
    }
    Pending p;
    p.fd = std::move(fd);
    p.deadline = handshake_timeout_.count() > 0
                     ? Deadline::earliest(deadline_, Deadline::after(handshake_timeout_))
                     : deadline_;
    if (tls_) {
      try {
        p.session = std::make_unique<net::tls::Session>(tls_, p.fd.get(), net::tls::Role::kServer);
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

void Acceptor::reject(const Pending& p, const std::string& why) const {
  TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from "
                   << net::SocketAddress::peer_of(p.fd.get()).to_string() << ": " << why;
}

// Advances `p` as far as its bytes allow; true when the connection is finished with
// (handed to the sink or rejected).
bool Acceptor::progress(Pending* p) {
  constexpr std::string_view kAuthContext = "tcp-transport";
  p->events = POLLIN;
  if (p->step == Step::kSniff) {
    // A plain peer is told so in plain bytes, before OpenSSL answers it with an alert.
    uint8_t first[3] = {};
    const ssize_t n = ::recv(p->fd.get(), first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) return true;  // closed before saying anything
    if (n == 3 ? !net::tls::looks_like_tls(first) : first[0] != 0x16) {
      reject(*p,
             detail::str_cat("it does not use TLS, and this rank does (", net::tls::kTlsHint, ")"));
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
    AuthResponder::State state = p->auth->progress(link, p->deadline);
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
      reject(*p, detail::str_cat("it uses TLS, and this rank does not (", net::tls::kTlsHint, ")"));
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
  std::string why = check_hello(h, group_id_, nsocks_, rank_, lowest_sender_, size_ - 1);
  if (why.empty() && static_cast<int>(h.route.sender) == rank_) why = "it claims this rank";
  if (why.empty()) why = sink_->refuse(static_cast<int>(h.route.sender), h.lane);
  const bool crossed = why == AcceptSink::kCrossed;
  const bool left = why == AcceptSink::kLeft;
  if (!why.empty() && !crossed && !left) {
    reject(*p, why);
    return true;
  }
  uint8_t reply[kHelloBytes];
  encode_hello(hello_to(rank_, static_cast<int>(h.route.sender), group_id_,
                        crossed ? kCrossedLane
                        : left  ? kLeftLane
                                : h.lane,
                        nsocks_),
               reply);
  try {
    link.write_full(reply, kHelloBytes, p->deadline, peer);
  } catch (const Error& e) {
    TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": hello to rank " << h.route.sender
                     << " failed: " << e.what();
    return true;
  }
  if (crossed || left) return true;  // the peer reads the reply, then sees the close
  sink_->take(static_cast<int>(h.route.sender), h.lane, std::move(p->fd), std::move(p->session),
              peer);
  return true;
}

}  // namespace tdist::transport::tcp
