// SealedStream: frames sealed with AES-128-GCM under keys exported from a TLS session.
#include "net/sealed_stream.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <cstring>

#include "tdist/error.h"

namespace tdist::net::tls {
namespace {

constexpr size_t kKeyBytes = 16;
constexpr size_t kIvBytes = 12;
constexpr char kLabel[] = "EXPORTER-tdist-sealed-stream";

const EVP_CIPHER* aes_128_gcm() {
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-128-GCM", nullptr);
  TDIST_CHECK(cipher != nullptr, Error, "TLS: libcrypto has no AES-128-GCM");
  return cipher;
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

struct SealedStream::Direction {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  uint8_t iv[kIvBytes] = {};
  uint64_t frame = 0;       // the next frame's number
  uint8_t client_side = 0;  // 1: the TLS client's direction
  ~Direction() { EVP_CIPHER_CTX_free(ctx); }

  // Frame `frame`'s nonce: the IV with the frame number XORed into its last 8 bytes.
  void nonce(uint8_t* out) const {
    std::memcpy(out, iv, kIvBytes);
    for (int i = 0; i < 8; ++i) out[kIvBytes - 1 - i] ^= static_cast<uint8_t>(frame >> (8 * i));
  }
};

SealedStream::SealedStream(Session& session, unsigned epoch_bits)
    : session_(session),
      epoch_mask_((uint64_t{1} << epoch_bits) - 1),
      send_(std::make_unique<Direction>()),
      recv_(std::make_unique<Direction>()) {
  TDIST_CHECK(epoch_bits >= 1 && epoch_bits <= kEpochBits, InvalidArgument,
              "TLS: a sealed stream's epoch of 2^", epoch_bits, " frames is out of range");
  TDIST_CHECK(send_->ctx != nullptr && recv_->ctx != nullptr, Error, "TLS: out of memory");
  const bool client = session.role() == Role::kClient;
  send_->client_side = client ? 1 : 0;
  recv_->client_side = client ? 0 : 1;
  rekey(*send_, true);
  rekey(*recv_, false);
}

SealedStream::~SealedStream() = default;

// The keys of the epoch that frame d.frame belongs to: 28 bytes exported with the context
// {epoch (8 bytes, big endian), direction (1: the client's)}.
void SealedStream::rekey(Direction& d, bool sending) {
  const uint64_t epoch = d.frame / (epoch_mask_ + 1);
  uint8_t context[9];
  for (int i = 0; i < 8; ++i) context[i] = static_cast<uint8_t>(epoch >> (56 - 8 * i));
  context[8] = d.client_side;
  uint8_t material[kKeyBytes + kIvBytes];
  {
    MutexLock lock(export_mu_);
    TDIST_CHECK(session_.export_keying_material(kLabel, context, sizeof(context), material,
                                                sizeof(material)),
                Error, "TLS: cannot export the stream's keys");
  }
  std::memcpy(d.iv, material + kKeyBytes, kIvBytes);
  const int ok = sending ? EVP_EncryptInit_ex(d.ctx, aes_128_gcm(), nullptr, material, nullptr)
                         : EVP_DecryptInit_ex(d.ctx, aes_128_gcm(), nullptr, material, nullptr);
  OPENSSL_cleanse(material, sizeof(material));
  TDIST_CHECK(ok == 1, Error, "TLS: cannot set the stream's key");
}

size_t SealedStream::plain_bytes(const uint8_t* frame) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{frame[i]} << (8 * i);
  return n;
}

void SealedStream::seal(const iovec* pieces, size_t count, size_t bytes, uint8_t* out) {
  Direction& d = *send_;
  if (d.frame != 0 && (d.frame & epoch_mask_) == 0) rekey(d, true);
  uint8_t nonce[kIvBytes];
  d.nonce(nonce);
  put_u32(out, static_cast<uint32_t>(bytes));
  int len = 0;
  bool ok = EVP_EncryptInit_ex(d.ctx, nullptr, nullptr, nullptr, nonce) == 1 &&
            EVP_EncryptUpdate(d.ctx, nullptr, &len, out, kLengthBytes) == 1;
  uint8_t* cipher = out + kLengthBytes;
  for (size_t i = 0, left = bytes; ok && left > 0 && i < count; ++i) {
    const size_t n = std::min(left, pieces[i].iov_len);
    ok = EVP_EncryptUpdate(d.ctx, cipher, &len, static_cast<const uint8_t*>(pieces[i].iov_base),
                           static_cast<int>(n)) == 1 &&
         static_cast<size_t>(len) == n;
    cipher += n;
    left -= n;
  }
  ok = ok && static_cast<size_t>(cipher - out) == kLengthBytes + bytes &&
       EVP_EncryptFinal_ex(d.ctx, cipher, &len) == 1 && len == 0 &&
       EVP_CIPHER_CTX_ctrl(d.ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, cipher) == 1;
  TDIST_CHECK(ok, Error, "TLS: sealing a frame failed");
  ++d.frame;
}

bool SealedStream::open(const uint8_t* frame, const iovec* pieces, size_t count) {
  Direction& d = *recv_;
  if (d.frame != 0 && (d.frame & epoch_mask_) == 0) rekey(d, false);
  const size_t bytes = plain_bytes(frame);
  uint8_t nonce[kIvBytes];
  d.nonce(nonce);
  int len = 0;
  bool ok = EVP_DecryptInit_ex(d.ctx, nullptr, nullptr, nullptr, nonce) == 1 &&
            EVP_DecryptUpdate(d.ctx, nullptr, &len, frame, kLengthBytes) == 1;
  const uint8_t* cipher = frame + kLengthBytes;
  size_t left = bytes;
  for (size_t i = 0; ok && left > 0 && i < count; ++i) {
    const size_t n = std::min(left, pieces[i].iov_len);
    ok = EVP_DecryptUpdate(d.ctx, static_cast<uint8_t*>(pieces[i].iov_base), &len, cipher,
                           static_cast<int>(n)) == 1 &&
         static_cast<size_t>(len) == n;
    cipher += n;
    left -= n;
  }
  uint8_t tag[kTagBytes];
  std::memcpy(tag, cipher, kTagBytes);
  ok = ok && left == 0 && EVP_CIPHER_CTX_ctrl(d.ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1 &&
       EVP_DecryptFinal_ex(d.ctx, tag, &len) == 1;
  ++d.frame;  // a frame that fails ends the stream: its number is never used again
  return ok;
}

}  // namespace tdist::net::tls
