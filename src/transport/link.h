// Link: the byte stream a transport's connection setup talks over (the authentication of
// auth_exchange.h, the hello) — a plain connected socket, or a TLS session on one
// (net/tls.h), so that the same code runs with and without TLS.
//
// recv_some/send_some never block: like recv/send on a non-blocking socket, they move what
// they can and report why nothing moved (kWantRead/kWantWrite: poll for that event; TLS
// may want to write while reading). read_full/write_full block up to a deadline and throw
// like net/socket.h's (PeerError, TimeoutError); through TLS, also AuthError when the peer
// refused this process's certificate (TLS 1.3 says so only on the first read after the
// handshake).
//
// Ownership: a Link owns nothing; the socket and the session outlive it.
// Thread-safety: none (one thread at a time, like the socket or session under it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "net/tls.h"
#include "tdist/deadline.h"

namespace tdist::transport {

class Link {
 public:
  using Status = net::tls::Session::Status;  // kOk, kWantRead, kWantWrite, kClosed, kFailed
  using Io = net::tls::Session::Io;

  explicit Link(int fd) : fd_(fd) {}
  explicit Link(net::tls::Session& session) : fd_(session.fd()), session_(&session) {}

  int fd() const { return fd_; }
  bool tls() const { return session_ != nullptr; }

  // Non-blocking; kClosed at the end of the peer's stream. error() says why after kFailed.
  Io recv_some(void* data, size_t size);
  Io send_some(const void* data, size_t size);
  const std::string& error() const { return session_ != nullptr ? session_->error() : error_; }

  void read_full(void* data, size_t size, Deadline deadline, std::string_view what);
  void write_full(const void* data, size_t size, Deadline deadline, std::string_view what);

  // Best effort, never blocks: ends this side of the stream (TLS: close_notify first),
  // then reads a little unread input, so that closing the socket sends FIN, not a reset
  // that could overtake what was just sent.
  void close_gently();

 private:
  int fd_;
  net::tls::Session* session_ = nullptr;
  std::string error_;  // plain: the errno text of the last failure
};

}  // namespace tdist::transport
