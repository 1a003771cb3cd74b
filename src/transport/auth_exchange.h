// The authentication of a transport connection (TCP socket, shared-memory setup socket)
// before its hello: net/auth.h's challenge-response in fixed-size messages.
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
// Failures that retrying cannot cure throw AuthError. Thread-safe: plain state per socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/auth.h"
#include "tdist/deadline.h"

namespace tdist::transport {

inline constexpr uint32_t kAuthMagic = 0x55416474;     // "tdAU"
inline constexpr uint32_t kRefusedMagic = 0x4f4e6474;  // "tdNO"
inline constexpr size_t kAuthHelloBytes = 40;
inline constexpr size_t kAuthChallengeBytes = 4 + net::auth::kChallengeBytes;
inline constexpr size_t kAuthStatusBytes = 4;

enum class AuthStatus : uint32_t { kOk = 0, kNoToken = 1, kWrongToken = 2 };

// Whether `first4` (the first bytes a peer sent) is an auth hello / a refusal.
bool is_auth_hello(const uint8_t* first4);
bool is_refusal(const uint8_t* first4);

// The initiator's side, blocking: proves this process knows `key` to the peer at `fd` and
// checks that the peer does too. `what` names the peer ("rank 3") in errors.
void authenticate_initiator(int fd, const net::auth::Key& key, std::string_view context,
                            Deadline deadline, const std::string& what);

// Tells an initiator that has a token that this process has none (B with kNoToken), or an
// initiator without one that this process requires one (`hello_bytes` of refusal). Best
// effort and non-blocking; then drains a little unread input so the close is no reset.
void refuse_no_token(int fd);
void refuse_unauthenticated(int fd, size_t hello_bytes);

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
  // was told).
  State progress(int fd, Deadline deadline);
  const std::string& why() const { return why_; }

 private:
  const net::auth::Key* key_;
  std::string context_;
  size_t hello_bytes_;
  uint8_t buf_[kAuthHelloBytes] = {};
  size_t got_ = 0;
  std::optional<net::auth::Responder> responder_;  // after A
  std::string why_;
};

}  // namespace tdist::transport
