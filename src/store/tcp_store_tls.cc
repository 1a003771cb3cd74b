// StoreServer, part 3: a connection's bytes, in plain text or through its TLS session
// (receive, send), the TLS handshake of a new connection, and refusing connections (the
// notices, and dropping new ones when out of descriptors). Also tls_context(), the
// Context of a server or client (tcp_store_tls.h).
//
// With TLS, a connection's first bytes decide: a TLS handshake record starts the
// handshake, anything else is refused with a plain-text notice that the store requires
// TLS. Without TLS, a connection whose first bytes are a TLS record is closed with a log
// line (its client's handshake then fails). After kAgain, a write is retried with the same
// bytes at its start (flush keeps out_start), as OpenSSL requires.
//
// Thread-safety: StoreServer's members run on its loop thread only; tls_context() is
// callable from any thread. Failures are the connection's: closed with a log line naming
// the peer and the reason (a refused certificate included), never raised to the loop.
#include "store/tcp_store_tls.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include "net/socket.h"
#include "store/tcp_store_server.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::store_internal {

using TlsStatus = net::tls::Session::Status;

std::shared_ptr<const net::tls::Context> tls_context(const std::optional<TlsFiles>& files) {
  if (!files) return net::tls::Context::from_settings();
  const net::tls::Config config{files->cert, files->key, files->ca};
  const int set = int{!config.cert.empty()} + int{!config.key.empty()} + int{!config.ca.empty()};
  if (set == 0) return nullptr;
  TDIST_CHECK(set == 3, InvalidArgument,
              "TCPStore: TLS needs a certificate, a key and a CA file, or none (TlsFiles: cert '",
              config.cert, "', key '", config.key, "', ca '", config.ca, "')");
  return net::tls::Context::get(config);
}

namespace {

// Unread input drained before a refused or failed connection is closed (net::end_sending).
constexpr size_t kDrainBytes = 64 * 1024;

// A session call's outcome as a connection's.
ConnectionIo from_session(const net::tls::Session& session, net::tls::Session::Io r) {
  using Kind = ConnectionIo::Kind;
  ConnectionIo io;
  switch (r.status) {
    case TlsStatus::kOk:
      io.bytes = r.bytes;
      return io;
    case TlsStatus::kWantRead:
    case TlsStatus::kWantWrite:
      io.kind = Kind::kAgain;
      return io;
    case TlsStatus::kClosed:
      io.kind = Kind::kClosed;
      return io;
    case TlsStatus::kFailed:
      break;
  }
  io.kind = Kind::kFailed;
  io.error = session.error();
  io.quiet = session.socket_errno() == ECONNRESET || session.socket_errno() == EPIPE;
  return io;
}

}  // namespace

ConnectionIo StoreServer::receive(Connection& c, void* data, size_t size) {
  if (c.tls) {
    const net::tls::Session::Io r = c.tls->read(data, size);
    c.tls_read_wants_write = r.status == TlsStatus::kWantWrite;
    c.tls_ended = r.status == TlsStatus::kClosed || r.status == TlsStatus::kFailed;
    return from_session(*c.tls, r);
  }
  ConnectionIo io;
  while (true) {
    const ssize_t n = ::recv(c.fd.get(), data, size, 0);
    if (n > 0) {
      io.bytes = static_cast<size_t>(n);
    } else if (n == 0) {
      io.kind = ConnectionIo::Kind::kClosed;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      io.kind = ConnectionIo::Kind::kAgain;
    } else {
      io.kind = ConnectionIo::Kind::kFailed;
      io.error = net::errno_text(errno);
      io.quiet = errno == ECONNRESET;
    }
    return io;
  }
}

ConnectionIo StoreServer::send(Connection& c, const void* data, size_t size) {
  if (c.tls) {
    const net::tls::Session::Io r = c.tls->write(data, size);
    c.tls_write_wants_read = r.status == TlsStatus::kWantRead;
    c.tls_ended = r.status == TlsStatus::kClosed || r.status == TlsStatus::kFailed;
    return from_session(*c.tls, r);
  }
  ConnectionIo io;
  while (true) {
    const ssize_t n = ::send(c.fd.get(), data, size, MSG_NOSIGNAL);
    if (n >= 0) {
      io.bytes = static_cast<size_t>(n);
      if (n == 0) io.kind = ConnectionIo::Kind::kAgain;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      io.kind = ConnectionIo::Kind::kAgain;
    } else {
      io.kind = ConnectionIo::Kind::kFailed;
      io.error = net::errno_text(errno);
      io.quiet = errno == EPIPE || errno == ECONNRESET;
    }
    return io;
  }
}

bool StoreServer::advance_tls(Connection& c) {
  using Tls = Connection::Tls;
  if (c.tls_state == Tls::kFirstBytes) {
    // Peeked, not taken: the session reads them. Fewer than 3 are completed as a TLS
    // client's would be, so that a prefix of a handshake record is not taken for plain text.
    uint8_t first[3] = {0x16, 0x03, 0x03};
    ssize_t n = 0;
    do {
      n = ::recv(c.fd.get(), first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      close_connection(c.id, "closed by the client before its TLS handshake", /*warn=*/false);
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      close_connection(c.id, std::string("read failed: ") + net::errno_text(errno),
                       /*warn=*/errno != ECONNRESET);
      return false;
    }
    if (!net::tls::looks_like_tls(first)) {
      refuse(c, detail::str_cat("this store requires TLS, and the client does not speak it (",
                                net::tls::kTlsHint, ")"));
      return false;
    }
    c.tls = std::make_unique<net::tls::Session>(tls_, c.fd.get(), net::tls::Role::kServer);
    c.tls->release_idle_buffers();  // thousands of idle clients keep no TLS buffers
    c.tls_state = Tls::kHandshake;
  }
  const TlsStatus status = c.tls->handshake();
  if (status == TlsStatus::kOk) {
    c.tls_state = Tls::kUp;
    update_interest(c);
    TDIST_LOG(kTrace) << "TCPStore server: TLS handshake with " << c.peer << " done";
    return true;
  }
  if (status == TlsStatus::kWantRead || status == TlsStatus::kWantWrite) {
    c.handshake_events = status == TlsStatus::kWantRead ? EPOLLIN : EPOLLOUT;
    update_interest(c);
    return true;
  }
  const std::string why = detail::str_cat(
      c.tls->rejected() ? "TLS handshake refused: " : "TLS handshake failed: ", c.tls->error());
  // The session's alert, if any, is not overtaken by a reset.
  net::end_sending(c.fd.get(), kDrainBytes);
  close_connection(c.id, why, /*warn=*/true);
  return false;
}

bool StoreServer::closed_tls_client(Connection& c) {
  // A frame's length can begin like a TLS record (16 03 01..04); its version byte then
  // tells them apart (a ClientHello has the low byte of its record's length there, which
  // matches the version 1 time in 256: that client is served as plain, and times out).
  if (c.in.size() < store_wire::kLengthBytes + 1) return false;
  c.first_bytes_checked = true;
  if (!net::tls::looks_like_tls(c.in.data()) ||
      c.in[store_wire::kLengthBytes] == store_wire::kVersion) {
    return false;
  }
  net::end_sending(c.fd.get(), kDrainBytes);
  close_connection(
      c.id,
      detail::str_cat("the client speaks TLS, and this store does not (", net::tls::kTlsHint, ")"),
      /*warn=*/true);
  return true;
}

bool StoreServer::evict_unproven() {
  // A connection flood (thousands that never authenticate, or never send a request) must
  // not lock the job's own clients out: out of descriptors, the oldest connection that
  // has not proved itself makes room, as sshd's MaxStartups drops unauthenticated ones.
  // A client of the job proves itself within a round trip of connecting, so the flood's
  // older connections go first.
  // With a token (or TLS) a connection proves itself by authenticating; without, by
  // sending a request.
  const bool proving = must_prove();
  Connection* oldest = nullptr;
  for (const auto& [id, c] : conns_) {
    const bool idle = c->in.empty() && c->out.size() == c->out_start && c->waits.empty();
    const bool unproven = !ready(*c) || (!proving && !c->served && idle);
    if (unproven && (oldest == nullptr || c->accepted_at < oldest->accepted_at)) {
      oldest = c.get();
    }
  }
  if (oldest == nullptr) return false;
  const auto now = std::chrono::steady_clock::now();
  const double age = std::chrono::duration<double>(now - oldest->accepted_at).count();
  const std::string why = detail::str_cat(
      "closed to make room: the server is out of file descriptors, and this connection ",
      ready(*oldest) ? "sent no request" : "did not authenticate", " in its ", age, " s");
  if (ready(*oldest) && !tls_) tell_refused(oldest->fd.get(), why);
  close_connection(oldest->id, why, /*warn=*/false);
  ++evicted_connections_;
  if (now >= next_drop_log_) {  // one line per 10 s at most, shared with drop_one_connection
    TDIST_LOG(kWarn) << "TCPStore server: out of file descriptors with " << conns_.size()
                     << " connections; closed " << evicted_connections_
                     << " that had not authenticated or sent a request, oldest first, to "
                        "accept new clients";
    evicted_connections_ = 0;
    next_drop_log_ = now + std::chrono::seconds(10);
  }
  return true;
}

bool StoreServer::drop_one_connection() {
  // The spare descriptor makes room to accept the waiting client and close it at once: it
  // sees a closed connection instead of hanging in the queue, and the level-triggered
  // listener does not spin. The dropped one is closed before the spare is taken again.
  const bool had_spare = static_cast<bool>(spare_fd_);
  bool dropped = false;
  int error = 0;
  if (had_spare) {
    spare_fd_.reset();
    net::Fd client = net::accept_tcp(listener_.fd.get(), &error);
    if (client && !tls_) tell_refused(client.get(), "the server is out of file descriptors");
    dropped = static_cast<bool>(client);
    client.reset();  // before the spare is taken again
    spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  if (dropped) ++dropped_connections_;
  const auto now = std::chrono::steady_clock::now();
  if (dropped_connections_ > 0 && now >= next_drop_log_) {  // one line per 10 s at most
    TDIST_LOG(kWarn) << "TCPStore server: out of file descriptors with " << conns_.size()
                     << " connections; dropped " << dropped_connections_
                     << " new connection(s) (raise the open-file limit, ulimit -n)";
    dropped_connections_ = 0;
    next_drop_log_ = now + std::chrono::seconds(10);
  }
  if (had_spare && !dropped && error == 0) return false;  // the queue emptied meanwhile
  if (spare_fd_ && dropped) return true;
  // No spare to be had (the process's descriptors are all taken): stop accepting until a
  // connection closes, rather than retrying in a loop.
  if (!accept_paused_) {
    TDIST_LOG(kWarn) << "TCPStore server: out of file descriptors with " << conns_.size()
                     << " connections; not accepting until one closes";
    loop_.modify(listener_.fd.get(), 0);
    accept_paused_ = true;
  }
  return false;
}

void StoreServer::tell_refused(int fd, const std::string& why) {
  // Best effort, never blocking: a fresh socket's send buffer takes a short frame.
  std::vector<uint8_t> notice;
  store_wire::FrameWriter(notice, static_cast<uint8_t>(store_wire::Status::kError),
                          store_wire::kNoticeRequestId)
      .bytes(std::string_view(why))
      .finish();
  (void)!::send(fd, notice.data(), notice.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  net::end_sending(fd, kDrainBytes);
}

void StoreServer::refuse(Connection& c, const std::string& why) {
  if (c.tls_state == Connection::Tls::kUp) {
    tell_refused_tls(c, why);
    close_connection(c.id, why, /*warn=*/true);
    return;
  }
  // Its replies so far go first (best effort, like the notice: no more than a challenge).
  if (c.out.size() > c.out_start) {
    (void)!::send(c.fd.get(), c.out.data() + c.out_start, c.out.size() - c.out_start,
                  MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  tell_refused(c.fd.get(), why);
  close_connection(c.id, why, /*warn=*/true);
}

void StoreServer::tell_refused_tls(Connection& c, const std::string& why) {
  // Its replies so far go first, from out_start: an interrupted write resumes there.
  std::vector<uint8_t> bytes(c.out.begin() + static_cast<std::ptrdiff_t>(c.out_start), c.out.end());
  store_wire::FrameWriter(bytes, static_cast<uint8_t>(store_wire::Status::kError),
                          store_wire::kNoticeRequestId)
      .bytes(std::string_view(why))
      .finish();
  for (size_t done = 0; done < bytes.size();) {  // best effort, never blocking
    const net::tls::Session::Io r = c.tls->write(bytes.data() + done, bytes.size() - done);
    if (r.status != TlsStatus::kOk) break;
    done += r.bytes;
  }
  c.tls->shutdown();
  c.tls_ended = true;
  ::shutdown(c.fd.get(), SHUT_WR);
  uint8_t drain[4096];  // as net::end_sending, through the session
  for (int i = 0; i < 16 && c.tls->read(drain, sizeof(drain)).status == TlsStatus::kOk; ++i) {
  }
}

}  // namespace tdist::store_internal
