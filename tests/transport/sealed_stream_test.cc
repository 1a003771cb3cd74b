// SealedStream (net/sealed_stream.h): the frames of two ends of one TLS session, over a
// socket pair. What one end seals the other opens, in order, across pieces and key epochs;
// an altered, reordered, repeated or foreign frame fails to open.
#include "net/sealed_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "net/fd.h"
#include "net/tls.h"
#include "support/test_certs.h"

namespace tdist::net::tls {
namespace {

using tdist::testing::TestPki;

const std::shared_ptr<const Context>& context() {
  static TestPki pki;
  static const std::shared_ptr<const Context> c = Context::get(pki.config("member"));
  return c;
}

// Two ends of one TLS connection over a non-blocking socket pair, through the handshake.
struct Pair {
  Fd a, b;
  std::unique_ptr<Session> client, server;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    a = Fd(fds[0]);
    b = Fd(fds[1]);
    client = std::make_unique<Session>(context(), a.get(), Role::kClient);
    server = std::make_unique<Session>(context(), b.get(), Role::kServer);
    Session::Status c = Session::Status::kWantRead, s = Session::Status::kWantRead;
    for (int step = 0; step < 100 && (c != Session::Status::kOk || s != Session::Status::kOk);
         ++step) {
      if (c != Session::Status::kOk) c = client->handshake();
      if (s != Session::Status::kOk) s = server->handshake();
    }
    EXPECT_EQ(c, Session::Status::kOk) << client->error();
    EXPECT_EQ(s, Session::Status::kOk) << server->error();
  }
};

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> seal(SealedStream& s, const std::vector<uint8_t>& plain) {
  std::vector<uint8_t> frame(plain.size() + SealedStream::kOverheadBytes);
  // In three pieces, as the channel gathers a header and a payload.
  const size_t cut1 = plain.size() / 3, cut2 = 2 * plain.size() / 3;
  const iovec pieces[3] = {{const_cast<uint8_t*>(plain.data()), cut1},
                           {const_cast<uint8_t*>(plain.data()) + cut1, cut2 - cut1},
                           {const_cast<uint8_t*>(plain.data()) + cut2, plain.size() - cut2}};
  s.seal(pieces, 3, plain.size(), frame.data());
  return frame;
}

bool open(SealedStream& s, const std::vector<uint8_t>& frame, std::vector<uint8_t>* plain) {
  const size_t bytes = SealedStream::plain_bytes(frame.data());
  plain->assign(bytes, 0);
  const size_t half = bytes / 2;
  const iovec pieces[2] = {{plain->data(), half}, {plain->data() + half, bytes - half}};
  return s.open(frame.data(), pieces, 2);
}

// Frames of 1 byte to 64 KiB both ways, with a key epoch of 4 frames: each end rekeys at
// the same frames, so every frame opens to what was sealed.
TEST(SealedStreamTest, FramesOpenInOrderBothWaysAcrossKeyEpochs) {
  Pair p;
  SealedStream client(*p.client, 2), server(*p.server, 2);
  const size_t sizes[] = {1, 32,   4096,  16384 + 5, SealedStream::kMaxFrameBytes, 100, 7, 65000,
                          3, 1000, 20000, 2};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const auto plain = pattern(sizes[i], static_cast<uint8_t>(i));
    std::vector<uint8_t> got;
    const auto up = seal(client, plain);
    EXPECT_EQ(SealedStream::plain_bytes(up.data()), sizes[i]);
    ASSERT_TRUE(open(server, up, &got)) << "frame " << i << " up";
    EXPECT_EQ(got, plain) << "frame " << i << " up";
    const auto down = seal(server, plain);
    ASSERT_TRUE(open(client, down, &got)) << "frame " << i << " down";
    EXPECT_EQ(got, plain) << "frame " << i << " down";
    EXPECT_NE(std::vector<uint8_t>(up.begin() + 4, up.end() - 16), plain) << "not encrypted";
  }
}

// The key does change at an epoch's first frame: an end that rekeys every 4 frames and one
// that does not agree on frames 0-3 and disagree on frame 4.
TEST(SealedStreamTest, EachEpochHasItsOwnKey) {
  Pair p;
  SealedStream client(*p.client, 2), server(*p.server);
  std::vector<uint8_t> got;
  for (int frame = 0; frame < 4; ++frame) {
    EXPECT_TRUE(open(server, seal(client, pattern(64, 9)), &got)) << "frame " << frame;
  }
  EXPECT_FALSE(open(server, seal(client, pattern(64, 9)), &got)) << "frame 4";
}

// A bit flipped in the length, the ciphertext or the tag fails the frame.
TEST(SealedStreamTest, AnAlteredFrameFailsToOpen) {
  for (size_t at : {size_t{0}, size_t{4}, size_t{500}, size_t{1023 + 4 + 15}}) {
    Pair p;
    SealedStream client(*p.client), server(*p.server);
    auto frame = seal(client, pattern(1023, 1));
    frame[at] ^= at == 0 ? 0x01 : 0x40;  // a length of 1022: shorter, still in the frame
    std::vector<uint8_t> got;
    EXPECT_FALSE(open(server, frame, &got)) << "byte " << at;
  }
}

// Frames are numbered implicitly: the second frame first, or the first one twice, fails.
TEST(SealedStreamTest, AReorderedOrRepeatedFrameFailsToOpen) {
  {
    Pair p;
    SealedStream client(*p.client), server(*p.server);
    const auto first = seal(client, pattern(100, 1));
    const auto second = seal(client, pattern(100, 2));
    std::vector<uint8_t> got;
    EXPECT_FALSE(open(server, second, &got));
  }
  {
    Pair p;
    SealedStream client(*p.client), server(*p.server);
    const auto first = seal(client, pattern(100, 1));
    std::vector<uint8_t> got;
    EXPECT_TRUE(open(server, first, &got));
    EXPECT_FALSE(open(server, first, &got));
  }
}

// Keys differ per session and per direction: a frame of another session, or an end's own
// frame fed back to it, fails.
TEST(SealedStreamTest, AnotherSessionsOrDirectionsFrameFailsToOpen) {
  Pair p, q;
  SealedStream client(*p.client), server(*p.server);
  SealedStream other_client(*q.client), other_server(*q.server);
  const auto frame = seal(other_client, pattern(256, 3));
  std::vector<uint8_t> got;
  EXPECT_FALSE(open(server, frame, &got));
  const auto own = seal(client, pattern(256, 3));
  EXPECT_FALSE(open(client, own, &got));
  EXPECT_TRUE(open(other_server, frame, &got));
  EXPECT_EQ(got, pattern(256, 3));
}

}  // namespace
}  // namespace tdist::net::tls
