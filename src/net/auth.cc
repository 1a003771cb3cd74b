// The HMAC-SHA256 challenge-response of auth.h, over libcrypto.
#include "net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::net::auth {
namespace {

constexpr std::string_view kInitiatorLabel = "tdist-auth initiator";
constexpr std::string_view kResponderLabel = "tdist-auth responder";

std::string read_token_file(const std::string& path) {
  struct stat st {};
  TDIST_CHECK(::stat(path.c_str(), &st) == 0, InvalidArgument, "TDIST_AUTH_TOKEN_FILE=", path, ": ",
              std::strerror(errno));
  TDIST_CHECK((st.st_mode & (S_IROTH | S_IWOTH)) == 0, InvalidArgument,
              "TDIST_AUTH_TOKEN_FILE=", path,
              ": others may read or write it; make it private (chmod 600)");
  std::ifstream in(path);
  std::string line;
  TDIST_CHECK(in && std::getline(in, line) && !line.empty(), InvalidArgument,
              "TDIST_AUTH_TOKEN_FILE=", path, ": cannot read a token from its first line");
  if (line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

Key::Key(std::string secret) : secret_(std::move(secret)) {
  if (secret_.empty()) return;
  static const bool initialised = OPENSSL_init_crypto(0, nullptr) == 1;
  TDIST_CHECK(initialised, Error, "libcrypto failed to initialise");
}

Key Key::from_settings() {
  std::string token = setting_string("TDIST_AUTH_TOKEN");
  if (!token.empty()) return Key(std::move(token));
  std::string path = setting_string("TDIST_AUTH_TOKEN_FILE");
  if (path.empty()) return Key();
  return Key(read_token_file(path));
}

Nonce random_nonce() {
  Nonce n;
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    TDIST_CHECK(r > 0, Error, "getrandom failed: ", std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return n;
}

Mac mac(const Key& key, std::string_view label, std::string_view context, const Nonce& a,
        const Nonce& b) {
  std::vector<uint8_t> msg;
  msg.reserve(label.size() + 1 + context.size() + a.size() + b.size());
  msg.insert(msg.end(), label.begin(), label.end());
  msg.push_back(0);  // the label cannot run into the context
  msg.insert(msg.end(), context.begin(), context.end());
  msg.insert(msg.end(), a.begin(), a.end());
  msg.insert(msg.end(), b.begin(), b.end());
  Mac out;
  unsigned int len = 0;
  const std::string& secret = key.secret();
  const uint8_t* ok = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(),
                           msg.size(), out.data(), &len);
  TDIST_CHECK(ok != nullptr && len == out.size(), Error, "HMAC-SHA256 failed");
  return out;
}

Initiator::Initiator(const Key& key, std::string_view context)
    : key_(key), context_(context), nonce_(random_nonce()) {}

std::optional<Mac> Initiator::answer(const uint8_t* challenge) {
  Nonce theirs;
  std::memcpy(theirs.data(), challenge, kNonceBytes);
  Mac expected = mac(key_, kResponderLabel, context_, nonce_, theirs);
  if (CRYPTO_memcmp(expected.data(), challenge + kNonceBytes, kMacBytes) != 0) return {};
  return mac(key_, kInitiatorLabel, context_, nonce_, theirs);
}

Responder::Responder(const Key& key, std::string_view context, const uint8_t* initiator_nonce)
    : key_(key), context_(context), nonce_(random_nonce()) {
  std::memcpy(initiator_nonce_.data(), initiator_nonce, kNonceBytes);
}

std::array<uint8_t, kChallengeBytes> Responder::challenge() const {
  std::array<uint8_t, kChallengeBytes> out;
  Mac m = mac(key_, kResponderLabel, context_, initiator_nonce_, nonce_);
  std::memcpy(out.data(), nonce_.data(), kNonceBytes);
  std::memcpy(out.data() + kNonceBytes, m.data(), kMacBytes);
  return out;
}

bool Responder::check(const uint8_t* proof) const {
  Mac expected = mac(key_, kInitiatorLabel, context_, initiator_nonce_, nonce_);
  return CRYPTO_memcmp(expected.data(), proof, kMacBytes) == 0;
}

}  // namespace tdist::net::auth
