// The transport's authentication messages (auth_exchange.h).
#include "transport/auth_exchange.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::transport {
namespace {

constexpr uint16_t kAuthVersion = 1;
constexpr size_t kNonceOffset = 8;

void put32(uint8_t* out, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t get32(const uint8_t* in) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= uint32_t{in[i]} << (8 * i);
  return v;
}

// Sends `n` bytes if the socket takes them now, half-closes, and reads a little unread
// input, so that the close does not turn into a reset that overtakes what was sent.
void send_and_close_gently(int fd, const uint8_t* data, size_t n) {
  (void)!::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  uint8_t drain[256];
  for (int i = 0; i < 4 && ::recv(fd, drain, sizeof(drain), MSG_DONTWAIT) > 0; ++i) {
  }
}

void send_status(int fd, AuthStatus status, Deadline deadline) {
  uint8_t d[kAuthStatusBytes];
  put32(d, static_cast<uint32_t>(status));
  net::write_full(fd, d, sizeof(d), deadline, "the authenticating peer");
}

}  // namespace

bool is_auth_hello(const uint8_t* first4) { return get32(first4) == kAuthMagic; }
bool is_refusal(const uint8_t* first4) { return get32(first4) == kRefusedMagic; }

void authenticate_initiator(int fd, const net::auth::Key& key, std::string_view context,
                            Deadline deadline, const std::string& what) {
  net::auth::Initiator initiator(key, context);
  uint8_t a[kAuthHelloBytes] = {};
  put32(a, kAuthMagic);
  a[4] = static_cast<uint8_t>(kAuthVersion);
  a[5] = static_cast<uint8_t>(kAuthVersion >> 8);
  std::memcpy(a + kNonceOffset, initiator.nonce().data(), net::auth::kNonceBytes);
  net::write_full(fd, a, sizeof(a), deadline, what);
  uint8_t b[kAuthChallengeBytes];
  net::read_full(fd, b, sizeof(b), deadline, what);
  if (is_refusal(b) || static_cast<AuthStatus>(get32(b)) != AuthStatus::kOk) {
    TDIST_THROW(AuthError, what, " has no authentication token, and this process has one (",
                net::auth::kTokenHint, ")");
  }
  std::optional<net::auth::Mac> proof = initiator.answer(b + 4);
  if (!proof) {
    TDIST_THROW(AuthError, what, " does not know this job's authentication token (",
                net::auth::kTokenHint, ")");
  }
  net::write_full(fd, proof->data(), proof->size(), deadline, what);
  uint8_t d[kAuthStatusBytes];
  net::read_full(fd, d, sizeof(d), deadline, what);
  if (static_cast<AuthStatus>(get32(d)) != AuthStatus::kOk) {
    TDIST_THROW(AuthError, what, " refused this process's authentication token (",
                net::auth::kTokenHint, ")");
  }
}

void refuse_no_token(int fd) {
  uint8_t b[kAuthChallengeBytes] = {};
  put32(b, static_cast<uint32_t>(AuthStatus::kNoToken));
  send_and_close_gently(fd, b, sizeof(b));
}

void refuse_unauthenticated(int fd, size_t hello_bytes) {
  uint8_t r[kAuthHelloBytes] = {};
  put32(r, kRefusedMagic);
  send_and_close_gently(fd, r, std::min(hello_bytes, sizeof(r)));
}

AuthResponder::State AuthResponder::progress(int fd, Deadline deadline) {
  while (true) {
    const size_t want = responder_ ? net::auth::kMacBytes : kAuthHelloBytes;
    while (got_ < want) {
      ssize_t n = ::recv(fd, buf_ + got_, want - got_, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return State::kMore;
      if (n <= 0) {
        why_ = "the connection closed during authentication";
        return State::kRefused;
      }
      got_ += static_cast<size_t>(n);
      if (!responder_ && got_ >= 4 && !is_auth_hello(buf_)) {
        refuse_unauthenticated(fd, hello_bytes_);
        why_ = detail::str_cat("it did not authenticate (", net::auth::kTokenHint, ")");
        return State::kRefused;
      }
    }
    got_ = 0;
    try {
      if (!responder_) {  // A is complete: answer with the challenge
        const uint8_t zeros[kAuthHelloBytes] = {};
        const bool well_formed =
            buf_[4] == static_cast<uint8_t>(kAuthVersion) && buf_[5] == 0 &&
            std::memcmp(buf_ + 6, zeros, 2) == 0 &&
            std::memcmp(buf_ + kNonceOffset + net::auth::kNonceBytes, zeros,
                        kAuthHelloBytes - kNonceOffset - net::auth::kNonceBytes) == 0;
        if (!well_formed) {
          refuse_unauthenticated(fd, hello_bytes_);
          why_ = "a malformed authentication hello (another version of tdist?)";
          return State::kRefused;
        }
        responder_.emplace(*key_, context_, buf_ + kNonceOffset);
        uint8_t b[kAuthChallengeBytes];
        put32(b, static_cast<uint32_t>(AuthStatus::kOk));
        auto challenge = responder_->challenge();
        std::memcpy(b + 4, challenge.data(), challenge.size());
        net::write_full(fd, b, sizeof(b), deadline, "the authenticating peer");
        continue;  // its proof may be there already
      }
      const bool ok = responder_->check(buf_);
      send_status(fd, ok ? AuthStatus::kOk : AuthStatus::kWrongToken, deadline);
      if (ok) return State::kAccepted;
      why_ = detail::str_cat("wrong authentication token (", net::auth::kTokenHint, ")");
      return State::kRefused;
    } catch (const Error& e) {
      why_ = detail::str_cat("authentication failed: ", e.what());
      return State::kRefused;
    }
  }
}

}  // namespace tdist::transport
