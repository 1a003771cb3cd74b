// Mutual TLS (OpenSSL's libssl) for the TCPStore and the TCP transport, as gloo's TCP_TLS.
//
// Settings: TDIST_TLS_CERT (this process's certificate chain, PEM), TDIST_TLS_KEY (its
// private key, PEM; not readable by others) and TDIST_TLS_CA (the CA certificates that
// sign the job's certificates: a PEM file or an OpenSSL hashed directory). All three or
// none; with none, nothing changes. With them, every store and tcp-transport connection
// speaks TLS 1.3 from its first byte, and both ends must present a certificate that the CA
// signed (no host names are checked: the CA decides who belongs to the job). Token
// authentication (auth.h), when set, then runs inside the TLS connection. The tcp
// transport's bulk bytes then go in frames keyed by the session (sealed_stream.h).
//
// A Session is one TLS connection over a connected, non-blocking socket that it does not
// own. Its I/O goes through send(MSG_NOSIGNAL)/recv, so a peer that vanished is an error,
// never SIGPIPE. The non-blocking calls report what the socket must become before a retry
// (kWantRead/kWantWrite); a write that wanted more room must be retried with the same
// bytes at its start (OpenSSL's rule; callers that resend from the same offset do).
//
// Thread-safety: Context is immutable and shared. A Session is not thread-safe: one
// thread at a time, reads and writes included (OpenSSL's rule for one SSL object).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tdist/deadline.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace tdist::net::tls {

struct Config {
  std::string cert;
  std::string key;
  std::string ca;
  bool enabled() const { return !cert.empty(); }
};

// What to tell a user whose peers disagree about TLS.
inline constexpr const char* kTlsHint =
    "every process of a job needs TLS or none: TDIST_TLS_CERT, TDIST_TLS_KEY and TDIST_TLS_CA";

// From TDIST_TLS_CERT/KEY/CA; throws InvalidArgument when only some are set.
Config config_from_settings();

// The loaded certificate, key and CA of one Config (an SSL_CTX for both roles).
class Context {
 public:
  // Loaded once per process and Config, then shared; throws InvalidArgument naming the
  // file and OpenSSL's reason when a file cannot be loaded, the key does not match the
  // certificate, or the key file is readable by others.
  static std::shared_ptr<const Context> get(const Config& config);
  // The Context of config_from_settings(), or null when TLS is off.
  static std::shared_ptr<const Context> from_settings();

  explicit Context(const Config& config);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  SSL_CTX* raw() const { return ctx_; }

 private:
  SSL_CTX* ctx_ = nullptr;
};

enum class Role { kClient, kServer };  // the side that connected / accepted

// Whether the first bytes a peer sent (at least 3) look like a TLS handshake record.
bool looks_like_tls(const uint8_t* first3);

class Session {
 public:
  enum class Status { kOk, kWantRead, kWantWrite, kClosed, kFailed };
  struct Io {
    size_t bytes = 0;
    Status status = Status::kOk;  // kOk with bytes > 0, else why nothing moved
  };

  Session(std::shared_ptr<const Context> context, int fd, Role role);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // One non-blocking step of the handshake: kOk once both sides verified each other.
  Status handshake();
  // Like recv/send on a non-blocking socket. read: kClosed at the peer's close, with or
  // without close_notify (the protocols above frame their messages and see a cut).
  Io read(void* data, size_t size);
  Io write(const void* data, size_t size);
  // Whether decrypted bytes wait inside the session (the socket may then never be readable
  // again for them: read before sleeping).
  bool has_pending() const;
  // RFC 8446 7.5's exporter (established sessions): `bytes` of keying material for `label`
  // and `context`, the same at both ends; false when OpenSSL fails.
  bool export_keying_material(const char* label, const uint8_t* context, size_t context_bytes,
                              uint8_t* out, size_t bytes);
  Role role() const { return role_; }
  // Best effort, non-blocking: tells the peer that this side is done (close_notify).
  void shutdown();
  // Frees the session's buffers whenever they are empty (for servers with many idle
  // connections; costs an allocation per record on busy ones).
  void release_idle_buffers();

  // Why the last call failed (kFailed, kClosed): OpenSSL's reason, the certificate check's
  // verdict, or the socket's errno text.
  const std::string& error() const { return error_; }
  // Whether the handshake failed on a certificate (ours or the peer's) or the peer does not
  // speak TLS, rather than on the socket; also after a read that got the peer's refusal.
  bool rejected() const { return rejected_; }
  // The socket's errno when the last call failed on it (ECONNRESET, EPIPE, ...), else 0.
  int socket_errno() const { return socket_errno_; }
  int fd() const { return fd_; }

 private:
  void begin_call();
  Status status_of(int ret, const char* what);

  std::shared_ptr<const Context> context_;
  SSL* ssl_ = nullptr;
  int fd_;
  Role role_;
  std::string error_;
  bool rejected_ = false;
  int socket_errno_ = 0;
};

// Blocking helpers, waiting in poll() up to `deadline`; `what` names the peer in errors.
// handshake: AuthError when a certificate was refused (either side), PeerError when the
// connection broke, TimeoutError at the deadline. read_full/write_full: PeerError,
// TimeoutError; read_full also AuthError when the peer refused this process's certificate
// (TLS 1.3 tells a client so only after its handshake, on its first read).
void handshake(Session& session, Deadline deadline, const std::string& what);
void read_full(Session& session, void* data, size_t size, Deadline deadline,
               const std::string& what);
void write_full(Session& session, const void* data, size_t size, Deadline deadline,
                const std::string& what);

}  // namespace tdist::net::tls
