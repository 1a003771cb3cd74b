// SealedStream: the bytes of a TLS connection after its handshake, in frames sealed with
// AES-128-GCM under keys exported from the session (RFC 8446 7.5's exporter, as DTLS-SRTP
// keys SRTP), for the TCP transport's bulk traffic (transport/tcp/tls_channel.h).
//
// Why not OpenSSL's own records: OpenSSL encrypts each 16 KiB record into a buffer of its
// own (copied again to gather records for one send), decrypts in its read buffer and copies
// the plaintext out, and spends a few percent per record on bookkeeping; that was the gap
// between TLS and the cipher's speed (docs/performance.md, issue 36). A frame here is
// sealed straight from the caller's bytes into the send buffer and opened straight into the
// caller's buffers, up to 64 KiB at a time. Kernel TLS would do the same in the kernel.
//
// A frame: u32 n (little endian: the plaintext's length, also the AEAD's associated data),
// n bytes of ciphertext, a 16-byte tag. Each direction (the TLS client's, the server's) has
// its own key and 12-byte IV; frame k's nonce is the IV with k (big endian) XORed into its
// last 8 bytes (TLS 1.3's construction), so no nonce repeats under a key; every 2^22 frames
// (at most 256 GiB) a direction moves to the next epoch's key, exported with the epoch as
// the context, well inside AES-GCM's usage limits (RFC 8446 5.5). Frames are in order and
// numbered implicitly: one dropped, repeated, reordered, cut or altered fails to open.
// Both ends must switch at the same point of the stream: after the last record either one
// sent over the session, with nothing read beyond it (a Session reads one record at a
// time: it never reads ahead).
//
// Thread-safety: seal() and open() may run at once on two threads, one each; the session
// is used only for the exporter, under a lock of this stream's.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "net/tls.h"
#include "tdist/thread_annotations.h"

namespace tdist::net::tls {

class SealedStream {
 public:
  static constexpr size_t kLengthBytes = 4;
  static constexpr size_t kTagBytes = 16;
  static constexpr size_t kOverheadBytes = kLengthBytes + kTagBytes;
  static constexpr size_t kMaxFrameBytes = 64 * 1024;  // plaintext
  static constexpr unsigned kEpochBits = 22;           // frames per key: 2^22

  // The keys of epoch 0 of both directions, from `session` (established; it outlives this).
  // `epoch_bits`: frames per key 2^epoch_bits (both ends alike; tests make it small).
  explicit SealedStream(Session& session, unsigned epoch_bits = kEpochBits);
  ~SealedStream();
  SealedStream(const SealedStream&) = delete;
  SealedStream& operator=(const SealedStream&) = delete;

  // Seals the next frame: `bytes` (1 .. kMaxFrameBytes) taken in order from `pieces` into
  // `out`, which has room for bytes + kOverheadBytes.
  void seal(const iovec* pieces, size_t count, size_t bytes, uint8_t* out);
  // The plaintext length that a frame announces in its first kLengthBytes. More than
  // kMaxFrameBytes means a corrupt stream.
  static size_t plain_bytes(const uint8_t* frame);
  // Opens the next frame, whole at `frame`, into `pieces` in order (their room adds up to at
  // least its plaintext length): false when it fails authentication (what the pieces then
  // hold is garbage).
  bool open(const uint8_t* frame, const iovec* pieces, size_t count);

 private:
  struct Direction;
  void rekey(Direction& d, bool sending);

  Session& session_;
  const uint64_t epoch_mask_;  // a frame number with none of these bits set starts an epoch
  Mutex export_mu_;            // the exporter's calls on the session
  std::unique_ptr<Direction> send_;
  std::unique_ptr<Direction> recv_;
};

}  // namespace tdist::net::tls
