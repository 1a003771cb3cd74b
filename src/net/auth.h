// Authentication of a connection by the job's secret: a mutual HMAC-SHA256
// challenge-response (libcrypto). Neither side sends the secret, and each proves that it
// knows it over nonces the other chose, so a recorded handshake cannot be replayed.
//
//   initiator -> responder:  nonce_i                       (kNonceBytes)
//   responder -> initiator:  nonce_r | mac_r                (kNonceBytes + kMacBytes)
//   initiator -> responder:  mac_i                          (kMacBytes)
//
//   mac_r = HMAC(secret, "tdist-auth responder" | context | nonce_i | nonce_r)
//   mac_i = HMAC(secret, "tdist-auth initiator" | context | nonce_i | nonce_r)
//
// `context` names the protocol (and what else both sides agree on), so a proof made for
// one protocol or role is worthless in another. Each protocol carries these bytes in its
// own framing (the store in its frames, the transports in their hellos); this file only
// makes and checks them. It authenticates; it does not encrypt (TLS does).
//
// The secret comes from TDIST_AUTH_TOKEN, or the first line of the file named by
// TDIST_AUTH_TOKEN_FILE (which must not be readable by others). Plain values; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tdist::net::auth {

inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;  // SHA-256
inline constexpr size_t kChallengeBytes = kNonceBytes + kMacBytes;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// What to tell a user whose peers disagree about authentication.
inline constexpr const char* kTokenHint =
    "every process of a job needs the same token: TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE "
    "(tdistrun sets one for its workers)";

// The job's secret; empty = no authentication.
class Key {
 public:
  Key() = default;
  // Also initialises libcrypto on the calling thread, once per process: its first use on a
  // short-lived thread (a server's) would leave that thread's setup allocations behind.
  explicit Key(std::string secret);
  // TDIST_AUTH_TOKEN, else TDIST_AUTH_TOKEN_FILE's first line (read now); throws
  // InvalidArgument for a file that cannot be read, is empty, or others may read.
  static Key from_settings();
  bool enabled() const { return !secret_.empty(); }
  const std::string& secret() const { return secret_; }

 private:
  std::string secret_;
};

// Fresh random bytes (the kernel's CSPRNG).
Nonce random_nonce();

// The initiator's side: its nonce, then the proof once the responder proved itself.
class Initiator {
 public:
  Initiator(const Key& key, std::string_view context);
  const Nonce& nonce() const { return nonce_; }
  // From the responder's challenge (nonce_r | mac_r): this side's proof, or nothing when
  // the responder does not know the secret.
  std::optional<Mac> answer(const uint8_t* challenge);

 private:
  Key key_;
  std::string context_;
  Nonce nonce_;
};

// The responder's side: the challenge for an initiator's nonce, then the check of its proof.
class Responder {
 public:
  Responder(const Key& key, std::string_view context, const uint8_t* initiator_nonce);
  // nonce_r | mac_r, kChallengeBytes.
  std::array<uint8_t, kChallengeBytes> challenge() const;
  // Whether `proof` (kMacBytes) is the initiator's proof over both nonces (constant time).
  bool check(const uint8_t* proof) const;

 private:
  Key key_;
  std::string context_;
  Nonce initiator_nonce_;
  Nonce nonce_;
};

// HMAC(secret, label | context | a | b); exposed for tests.
Mac mac(const Key& key, std::string_view label, std::string_view context, const Nonce& a,
        const Nonce& b);

}  // namespace tdist::net::auth
