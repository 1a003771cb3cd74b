// The authentication of a transport connection (TCP socket, shared-memory setup socket)
// before its hello: net/auth.h's challenge-response in fixed-size messages, over a Link
// (link.h: a plain socket, or the TLS session of a TCP connection with TLS).
//
//   initiator -> responder  A: magic "tdAU" u32 | version u16 | 0 u16 | nonce (16) | 0 (16)
//   responder -> initiator  B: status u32 | challenge (48)         status 0, else a refusal
//   initiator -> responder  C: proof (32)
//   responder -> initiator  D: status u32                           0: accepted
//
// All little-endian. A is 40 bytes, no shorter than either transport's hello, so a
// responder without a token that reads a hello's worth of it sees the magic and answers B
// with kNoToken instead of waiting. A responder with a token that gets a hello instead of A
// answers with a hello-sized refusal starting with kRefusedMagic (auth_refusal()).
// TLS on one end only: the end that expects plain bytes and sees a TLS handshake, or the
// TLS end that sees plain bytes, answers with a hello-sized refusal starting with
// kTlsRefusedMagic and closes (a TLS peer then fails its handshake, a plain one reads the
// magic where its hello reply or B would be).
// Failures that retrying cannot cure throw AuthError. Thread-safe: plain state per socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/auth.h"
#include "tdist/deadline.h"
#include "transport/link.h"

namespace tdist::transport {

inline constexpr uint32_t kAuthMagic = 0x55416474;        // "tdAU"
inline constexpr uint32_t kRefusedMagic = 0x4f4e6474;     // "tdNO"
inline constexpr uint32_t kTlsRefusedMagic = 0x4c546474;  // "tdTL"
inline constexpr size_t kAuthHelloBytes = 40;
inline constexpr size_t kAuthChallengeBytes = 4 + net::auth::kChallengeBytes;
inline constexpr size_t kAuthStatusBytes = 4;

enum class AuthStatus : uint32_t { kOk = 0, kNoToken = 1, kWrongToken = 2 };

// Whether `first4` (the first bytes a peer sent) is an auth hello / a refusal / a refusal
// because one end uses TLS and the other does not.
bool is_auth_hello(const uint8_t* first4);
bool is_refusal(const uint8_t* first4);
bool is_tls_refusal(const uint8_t* first4);

// The initiator's side, blocking: proves this process knows `key` to the peer at `link`
// and checks that the peer does too. `what` names the peer ("rank 3") in errors.
void authenticate_initiator(Link& link, const net::auth::Key& key, std::string_view context,
                            Deadline deadline, const std::string& what);
inline void authenticate_initiator(int fd, const net::auth::Key& key, std::string_view context,
                                   Deadline deadline, const std::string& what) {
  Link link(fd);
  authenticate_initiator(link, key, context, deadline, what);
}

// Tells an initiator that has a token that this process has none (B with kNoToken), or an
// initiator without one that this process requires one (`hello_bytes` of refusal), or a
// peer whose use of TLS differs from this process's (`hello_bytes` of kTlsRefusedMagic,
// always in plain bytes). Best effort and non-blocking; then closes this side gently.
void refuse_no_token(Link& link);
void refuse_unauthenticated(Link& link, size_t hello_bytes);
void refuse_tls_mismatch(int fd, size_t hello_bytes);
inline void refuse_no_token(int fd) {
  Link link(fd);
  refuse_no_token(link);
}

// The responder's side for a non-blocking acceptor: reads only as far as the exchange goes
// (the hello that follows stays in the socket).
class AuthResponder {
 public:
  enum class State { kMore, kAccepted, kRefused };
  // `hello_bytes`: the size of this transport's hello, for the refusal of a peer that
  // sends one without authenticating.
  AuthResponder(const net::auth::Key& key, std::string_view context, size_t hello_bytes)
      : key_(&key), context_(context), hello_bytes_(hello_bytes) {}
  // Reads what there is and answers; kRefused: close the socket (why() says why, the peer
  // was told). kMore through TLS: poll for what link.recv_some last wanted (wants_write()).
  State progress(Link& link, Deadline deadline);
  State progress(int fd, Deadline deadline) {
    Link link(fd);
    return progress(link, deadline);
  }
  bool wants_write() const { return wants_write_; }
  const std::string& why() const { return why_; }

 private:
  const net::auth::Key* key_;
  std::string context_;
  size_t hello_bytes_;
  uint8_t buf_[kAuthHelloBytes] = {};
  size_t got_ = 0;
  std::optional<net::auth::Responder> responder_;  // after A
  std::string why_;
  bool wants_write_ = false;
};

}  // namespace tdist::transport
