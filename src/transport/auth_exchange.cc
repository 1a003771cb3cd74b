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

// Sends `n` bytes if the stream takes them now, then closes this side gently.
void send_and_close_gently(Link& link, const uint8_t* data, size_t n) {
  (void)link.send_some(data, n);
  link.close_gently();
}

void send_status(Link& link, AuthStatus status, Deadline deadline) {
  uint8_t d[kAuthStatusBytes];
  put32(d, static_cast<uint32_t>(status));
  link.write_full(d, sizeof(d), deadline, "the authenticating peer");
}

}  // namespace

bool is_auth_hello(const uint8_t* first4) { return get32(first4) == kAuthMagic; }
bool is_refusal(const uint8_t* first4) { return get32(first4) == kRefusedMagic; }
bool is_tls_refusal(const uint8_t* first4) { return get32(first4) == kTlsRefusedMagic; }

void authenticate_initiator(Link& link, const net::auth::Key& key, std::string_view context,
                            Deadline deadline, const std::string& what) {
  net::auth::Initiator initiator(key, context);
  uint8_t a[kAuthHelloBytes] = {};
  put32(a, kAuthMagic);
  a[4] = static_cast<uint8_t>(kAuthVersion);
  a[5] = static_cast<uint8_t>(kAuthVersion >> 8);
  std::memcpy(a + kNonceOffset, initiator.nonce().data(), net::auth::kNonceBytes);
  link.write_full(a, sizeof(a), deadline, what);
  uint8_t b[kAuthChallengeBytes];
  link.read_full(b, 4, deadline, what);  // a TLS refusal is shorter than B
  if (is_tls_refusal(b)) {
    TDIST_THROW(AuthError, what, " uses TLS, and this process does not (", net::tls::kTlsHint, ")");
  }
  link.read_full(b + 4, sizeof(b) - 4, deadline, what);
  if (is_refusal(b) || static_cast<AuthStatus>(get32(b)) != AuthStatus::kOk) {
    TDIST_THROW(AuthError, what, " has no authentication token, and this process has one (",
                net::auth::kTokenHint, ")");
  }
  std::optional<net::auth::Mac> proof = initiator.answer(b + 4);
  if (!proof) {
    TDIST_THROW(AuthError, what, " does not know this job's authentication token (",
                net::auth::kTokenHint, ")");
  }
  link.write_full(proof->data(), proof->size(), deadline, what);
  uint8_t d[kAuthStatusBytes];
  link.read_full(d, sizeof(d), deadline, what);
  if (static_cast<AuthStatus>(get32(d)) != AuthStatus::kOk) {
    TDIST_THROW(AuthError, what, " refused this process's authentication token (",
                net::auth::kTokenHint, ")");
  }
}

void refuse_no_token(Link& link) {
  uint8_t b[kAuthChallengeBytes] = {};
  put32(b, static_cast<uint32_t>(AuthStatus::kNoToken));
  send_and_close_gently(link, b, sizeof(b));
}

void refuse_unauthenticated(Link& link, size_t hello_bytes) {
  uint8_t r[kAuthHelloBytes] = {};
  put32(r, kRefusedMagic);
  send_and_close_gently(link, r, std::min(hello_bytes, sizeof(r)));
}

void refuse_tls_mismatch(int fd, size_t hello_bytes) {
  uint8_t r[kAuthHelloBytes] = {};
  put32(r, kTlsRefusedMagic);
  Link plain(fd);
  send_and_close_gently(plain, r, std::min(hello_bytes, sizeof(r)));
}

AuthResponder::State AuthResponder::progress(Link& link, Deadline deadline) {
  while (true) {
    const size_t want = responder_ ? net::auth::kMacBytes : kAuthHelloBytes;
    while (got_ < want) {
      const Link::Io io = link.recv_some(buf_ + got_, want - got_);
      if (io.status == Link::Status::kWantRead || io.status == Link::Status::kWantWrite) {
        wants_write_ = io.status == Link::Status::kWantWrite;
        return State::kMore;
      }
      if (io.status != Link::Status::kOk) {
        why_ = io.status == Link::Status::kClosed
                   ? std::string("the connection closed during authentication")
                   : detail::str_cat("authentication failed: ", link.error());
        return State::kRefused;
      }
      got_ += io.bytes;
      if (!responder_ && got_ >= 4 && !link.tls() && net::tls::looks_like_tls(buf_)) {
        refuse_tls_mismatch(link.fd(), hello_bytes_);
        why_ = detail::str_cat("it uses TLS, and this rank does not (", net::tls::kTlsHint, ")");
        return State::kRefused;
      }
      if (!responder_ && got_ >= 4 && !is_auth_hello(buf_)) {
        refuse_unauthenticated(link, hello_bytes_);
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
          refuse_unauthenticated(link, hello_bytes_);
          why_ = "a malformed authentication hello (another version of tdist?)";
          return State::kRefused;
        }
        responder_.emplace(*key_, context_, buf_ + kNonceOffset);
        uint8_t b[kAuthChallengeBytes];
        put32(b, static_cast<uint32_t>(AuthStatus::kOk));
        auto challenge = responder_->challenge();
        std::memcpy(b + 4, challenge.data(), challenge.size());
        link.write_full(b, sizeof(b), deadline, "the authenticating peer");
        continue;  // its proof may be there already
      }
      const bool ok = responder_->check(buf_);
      send_status(link, ok ? AuthStatus::kOk : AuthStatus::kWrongToken, deadline);
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
