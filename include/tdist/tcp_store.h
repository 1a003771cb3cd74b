// TCPStore: a Store served over TCP by one process and used by any number of clients.
//
// TCPStoreServer is the server: one thread running an epoll event loop that serves
// thousands of clients. It runs inside rank 0 (TCPStore with is_server) or standalone
// (the launcher hosts one). It binds port 0 unless told a port and publishes the real
// one through port(); a port that is taken raises Error naming the address and port.
// Frames are binary and length-prefixed with a version byte; a malformed or oversized
// frame closes that client's connection with a log line, and the server keeps serving
// everyone else. Limits: TDIST_STORE_MAX_KEY_BYTES, TDIST_STORE_MAX_VALUE_BYTES,
// TDIST_STORE_MAX_CONNECTIONS. Destroying the server stops the loop and closes clients.
//
// With a token (TDIST_AUTH_TOKEN, TDIST_AUTH_TOKEN_FILE or the options), the server serves
// only clients that prove they know it, and a client talks only to a server that proves
// the same; the refused side gets a notice naming why, and the server logs one line.
//
// With TLS files (TDIST_TLS_CERT, TDIST_TLS_KEY and TDIST_TLS_CA, or TlsFiles in the
// options), every connection is mutual TLS 1.3 from its first byte: the server and its
// clients each present a certificate that the CA signed, and a token, when set, is then
// checked inside TLS. A client whose certificate is refused, or that reaches a server
// without TLS, raises AuthError naming why; a client without TLS that reaches a TLS
// server gets a notice that the store requires TLS. The server logs one line per refusal
// and keeps serving the others; a handshake must end within TDIST_STORE_FRAME_TIMEOUT.
//
// TCPStore is the client (and, with is_server, also owns a server). Connecting retries
// with backoff until the connect deadline, then raises TimeoutError naming host:port.
// A client object is thread-safe (calls are serialised on its one connection); a broken
// connection raises PeerError.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tdist/store.h"

namespace tdist {

// The PEM files of mutual TLS (see net/tls.h): this process's certificate chain, its
// private key (not readable by others) and the CA certificates that sign the job's
// certificates (a file or an OpenSSL hashed directory). All three, or all empty (no TLS).
// A file that cannot be loaded raises InvalidArgument naming it.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

class TCPStoreServer {
 public:
  // Binds host:port (port 0 = any free port) and starts serving. host "" or "0.0.0.0"
  // listens on every IPv4 address, "::" on every address.
  // `auth_token`: the job's secret every client must prove it knows (HMAC-SHA256
  // challenge-response) before any request is served; default TDIST_AUTH_TOKEN or
  // TDIST_AUTH_TOKEN_FILE's; "" = no authentication.
  // `tls`: serve only mutual TLS clients with these files; default TDIST_TLS_CERT,
  // TDIST_TLS_KEY and TDIST_TLS_CA; TlsFiles{} (all empty) = no TLS.
  static std::unique_ptr<TCPStoreServer> start(
      const std::string& host = "0.0.0.0", uint16_t port = 0,
      const std::optional<std::string>& auth_token = std::nullopt,
      const std::optional<TlsFiles>& tls = std::nullopt);
  virtual ~TCPStoreServer() = default;
  virtual uint16_t port() const = 0;
  // Stops serving and closes every client connection (also done by the destructor).
  virtual void stop() = 0;
};

struct TCPStoreOptions {
  uint16_t port = 0;               // the server's port; with is_server, 0 picks a free one
  bool is_server = false;          // also start a server on host:port inside this object
  std::optional<int> num_workers;  // with wait_for_workers: clients to wait for
  bool wait_for_workers = false;   // constructor waits until num_workers clients joined
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;  // default call timeout
  // How long to keep retrying the connection; default TDIST_STORE_CONNECT_TIMEOUT.
  std::optional<std::chrono::milliseconds> connect_timeout;
  // The job's secret, proven to the server (and the server's knowledge of it checked) when
  // connecting; also its own server's. Default TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE's;
  // "" = no authentication. A client and a server that disagree raise PeerError.
  std::optional<std::string> auth_token;
  // Mutual TLS for the connection (the handshake ends within the connect timeout), and for
  // its own server. Default TDIST_TLS_CERT, TDIST_TLS_KEY and TDIST_TLS_CA; TlsFiles{} = no
  // TLS. A refused certificate, or a server without TLS, raises AuthError.
  std::optional<TlsFiles> tls;
};

class TCPStore : public Store {
 public:
  TCPStore(std::string host, TCPStoreOptions options);
  ~TCPStore() override;

  const std::string& host() const;
  uint16_t port() const;  // the server's real port (after port 0 was resolved)

 protected:
  void do_set(const std::string& key, const Bytes& value) override;
  Bytes do_get(const std::string& key, Deadline deadline) override;
  int64_t do_add(const std::string& key, int64_t delta) override;
  Bytes do_compare_set(const std::string& key, const Bytes& expected,
                       const Bytes& desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool do_delete_key(const std::string& key) override;
  int64_t do_num_keys() override;
  void do_append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> do_multi_get(const std::vector<std::string>& keys, Deadline deadline) override;
  void do_multi_set(const std::vector<std::string>& keys,
                    const std::vector<Bytes>& values) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdist
