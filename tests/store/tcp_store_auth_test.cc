// TCPStore authentication (net/auth.h, the AUTH_HELLO/AUTH_PROOF frames): a client with the
// job's token is served; a wrong token, no token, a token against a server without one, a
// replayed handshake, a request before authenticating, an oversized first frame and a
// client that never authenticates are refused with a notice before any key is read or
// written, while authenticated clients carry on. Also the token's sources
// (TDIST_AUTH_TOKEN, TDIST_AUTH_TOKEN_FILE and its permissions) and the HMAC itself.
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "net/auth.h"
#include "net/socket.h"
#include "store/tcp_store_protocol.h"
#include "support/error_of.h"
#include "tdist/error.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using namespace std::chrono_literals;
using store_wire::Command;
using store_wire::FrameWriter;

constexpr auto kShort = 10s;
const std::string kToken = "the-job-secret";

std::unique_ptr<TCPStore> client(uint16_t port, std::optional<std::string> token) {
  TCPStoreOptions o;
  o.port = port;
  o.connect_timeout = kShort;
  o.timeout = kShort;
  o.auth_token = std::move(token);
  return std::make_unique<TCPStore>("127.0.0.1", o);
}

using test_support::error_of;

// A raw connection speaking frames by hand.
class Raw {
 public:
  explicit Raw(uint16_t port) : fd_(net::connect_tcp("127.0.0.1", port, Deadline::after(kShort))) {}
  void send(const std::vector<uint8_t>& bytes) {
    net::write_full(fd_.get(), bytes.data(), bytes.size(), Deadline::after(kShort), "server");
  }
  // The next frame: status code, request id and payload; nullopt when the server closed.
  struct Frame {
    uint8_t code;
    uint32_t id;
    std::vector<uint8_t> payload;
  };
  std::optional<Frame> next() {
    uint8_t header[store_wire::kHeaderBytes];
    try {
      net::read_full(fd_.get(), header, sizeof(header), Deadline::after(kShort), "server");
      store_wire::FrameHeader h = store_wire::decode_header(header);
      std::vector<uint8_t> payload(h.payload_size());
      net::read_full(fd_.get(), payload.data(), payload.size(), Deadline::after(kShort), "server");
      return Frame{h.code, h.request_id, std::move(payload)};
    } catch (const PeerError&) {
      return std::nullopt;
    }
  }
  // The text of the notice the server sends before closing (fails the test if none).
  std::string notice() {
    std::optional<Frame> f = next();
    if (!f || f->id != store_wire::kNoticeRequestId) return "(no notice)";
    store_wire::PayloadReader r(f->payload, store_wire::Limits{1 << 20, 1 << 20});
    return r.message();
  }
  bool closed() {
    while (std::optional<Frame> f = next()) {
    }
    return true;
  }

 private:
  net::Fd fd_;
};

std::vector<uint8_t> frame(Command command, uint32_t id, std::span<const uint8_t> field) {
  std::vector<uint8_t> out;
  FrameWriter(out, static_cast<uint8_t>(command), id).bytes(field).finish();
  return out;
}

std::vector<uint8_t> set_frame(uint32_t id, const std::string& key) {
  std::vector<uint8_t> out;
  FrameWriter(out, static_cast<uint8_t>(Command::kSet), id)
      .bytes(std::string_view(key))
      .bytes(std::string_view("x"))
      .finish();
  return out;
}

class TCPStoreAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TCPStoreServer::start("127.0.0.1", 0, kToken);
    good_ = client(server_->port(), kToken);
    good_->set("before", std::string_view("1"));
  }
  // The authenticated client still works, and `key` was never written.
  void expect_unharmed(const std::string& key) {
    EXPECT_EQ(to_string(good_->get("before", Deadline::after(kShort))), "1");
    EXPECT_FALSE(good_->check({key}));
    EXPECT_EQ(good_->num_keys(), 1);
    EXPECT_EQ(to_string(client(server_->port(), kToken)->get("before", Deadline::after(kShort))),
              "1");
  }
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStore> good_;
};

TEST_F(TCPStoreAuth, TheTokenIsServed) {
  auto c = client(server_->port(), kToken);
  c->set("k", std::string_view("v"));
  EXPECT_EQ(to_string(good_->get("k", Deadline::after(kShort))), "v");
  EXPECT_EQ(c->add("n", 3), 3);
}

TEST_F(TCPStoreAuth, AWrongTokenIsRefused) {
  std::string what = error_of<AuthError>([&] { client(server_->port(), "not-the-secret"); });
  EXPECT_NE(what.find("does not know this job's authentication token"), std::string::npos) << what;
  expect_unharmed("x");
}

TEST_F(TCPStoreAuth, NoTokenIsRefusedBeforeAnyKeyIsWritten) {
  auto c = client(server_->port(), "");
  std::string what = error_of<PeerError>([&] { c->set("intruder", std::string_view("x")); });
  EXPECT_NE(what.find("authentication required"), std::string::npos) << what;
  EXPECT_NE(what.find("TDIST_AUTH_TOKEN"), std::string::npos) << what;
  expect_unharmed("intruder");
}

TEST_F(TCPStoreAuth, NoKeyIsReadBeforeAuthenticating) {
  Raw raw(server_->port());
  std::vector<uint8_t> get;
  FrameWriter(get, static_cast<uint8_t>(Command::kGet), 1)
      .bytes(std::string_view("before"))
      .finish();
  raw.send(get);
  std::string notice = raw.notice();
  EXPECT_NE(notice.find("sent GET instead of AUTH_HELLO"), std::string::npos) << notice;
  EXPECT_TRUE(raw.closed());
  expect_unharmed("x");
}

TEST_F(TCPStoreAuth, AReplayedHandshakeIsRefused) {
  // A genuine handshake, recorded as a listener on the wire would see it.
  net::auth::Key key(kToken);
  net::auth::Initiator initiator(key, "tcp-store");
  Raw genuine(server_->port());
  const std::vector<uint8_t> hello = frame(Command::kAuthHello, 1, initiator.nonce());
  genuine.send(hello);
  std::optional<Raw::Frame> challenge = genuine.next();
  ASSERT_TRUE(challenge.has_value());
  store_wire::PayloadReader r(challenge->payload, store_wire::Limits{1 << 20, 1 << 20});
  Bytes c = r.value();
  ASSERT_EQ(c.size(), net::auth::kChallengeBytes);
  std::optional<net::auth::Mac> proof = initiator.answer(c.data());
  ASSERT_TRUE(proof.has_value());
  const std::vector<uint8_t> proof_frame = frame(Command::kAuthProof, 2, *proof);
  genuine.send(proof_frame);
  std::optional<Raw::Frame> ok = genuine.next();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->code, static_cast<uint8_t>(store_wire::Status::kOk));

  // The same bytes on a new connection, followed by a SET.
  Raw replay(server_->port());
  replay.send(hello);
  replay.send(proof_frame);
  replay.send(set_frame(3, "replayed"));
  std::optional<Raw::Frame> new_challenge = replay.next();  // a fresh one
  ASSERT_TRUE(new_challenge.has_value());
  EXPECT_NE(new_challenge->payload, challenge->payload);
  std::string notice = replay.notice();
  EXPECT_NE(notice.find("wrong authentication token"), std::string::npos) << notice;
  EXPECT_TRUE(replay.closed());
  expect_unharmed("replayed");
}

TEST_F(TCPStoreAuth, AnOversizedFrameBeforeAuthenticatingIsRefusedAtItsHeader) {
  Raw raw(server_->port());
  std::vector<uint8_t> big = set_frame(1, std::string(1000, 'k'));
  raw.send(std::vector<uint8_t>(big.begin(), big.begin() + 64));  // the header is enough
  std::string notice = raw.notice();
  EXPECT_NE(notice.find("authentication required"), std::string::npos) << notice;
  expect_unharmed("x");
}

TEST(TCPStoreAuthSettings, AClientThatNeverAuthenticatesIsClosed) {
  ::setenv("TDIST_STORE_FRAME_TIMEOUT", "0.5", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0, kToken);
  ::unsetenv("TDIST_STORE_FRAME_TIMEOUT");
  Raw idle(server->port());
  std::string notice = idle.notice();
  EXPECT_NE(notice.find("did not authenticate within 0.5 s"), std::string::npos) << notice;
  EXPECT_EQ(client(server->port(), kToken)->add("n", 1), 1);
}

// The grace for authenticating (TDIST_STORE_AUTH_GRACE, 5 s by default) is shorter than
// the frame timeout (30 s): a connection that never authenticates is closed after it,
// told which setting closed it; a client that authenticates at once is served throughout.
TEST(TCPStoreAuthSettings, AClientThatNeverAuthenticatesIsClosedAfterTheGrace) {
  ::setenv("TDIST_STORE_AUTH_GRACE", "0.5", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0, kToken);
  ::unsetenv("TDIST_STORE_AUTH_GRACE");
  auto good = client(server->port(), kToken);
  Raw idle(server->port());
  std::string notice = idle.notice();  // waits up to 10 s: 30 s (the frame timeout) is too late
  EXPECT_NE(notice.find("did not authenticate within 0.5 s (TDIST_STORE_AUTH_GRACE)"),
            std::string::npos)
      << notice;
  EXPECT_EQ(good->add("n", 1), 1);
}

TEST(TCPStoreAuthSettings, ATokenAgainstAServerWithoutOneIsRefused) {
  auto server = TCPStoreServer::start("127.0.0.1", 0, "");
  std::string what = error_of<AuthError>([&] { client(server->port(), kToken); });
  EXPECT_NE(what.find("has no authentication token"), std::string::npos) << what;
  EXPECT_EQ(client(server->port(), "")->add("n", 1), 1);
}

TEST(TCPStoreAuthSettings, TheTokenComesFromTheEnvironmentOrAPrivateFile) {
  auto server = TCPStoreServer::start("127.0.0.1", 0, kToken);
  ::setenv("TDIST_AUTH_TOKEN", kToken.c_str(), 1);
  EXPECT_EQ(client(server->port(), std::nullopt)->add("n", 1), 1);
  ::unsetenv("TDIST_AUTH_TOKEN");

  char dir[] = "/tmp/tdist_auth_test_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/token";
  std::ofstream(path) << kToken << "\n";
  ::setenv("TDIST_AUTH_TOKEN_FILE", path.c_str(), 1);
  ::chmod(path.c_str(), 0644);
  std::string what = error_of<InvalidArgument>([] { net::auth::Key::from_settings(); });
  EXPECT_NE(what.find("others may read or write it"), std::string::npos) << what;
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(net::auth::Key::from_settings().secret(), kToken);
  EXPECT_EQ(client(server->port(), std::nullopt)->add("n", 1), 2);
  ::unsetenv("TDIST_AUTH_TOKEN_FILE");
  std::remove(path.c_str());
  ::rmdir(dir);
}

TEST(NetAuth, ProofsDependOnTheKeyTheRoleAndBothNonces) {
  const net::auth::Key key("k"), other("k2");
  net::auth::Nonce a = net::auth::random_nonce(), b = net::auth::random_nonce();
  EXPECT_NE(a, b);
  EXPECT_EQ(net::auth::mac(key, "x", "ctx", a, b), net::auth::mac(key, "x", "ctx", a, b));
  EXPECT_NE(net::auth::mac(key, "x", "ctx", a, b), net::auth::mac(other, "x", "ctx", a, b));
  EXPECT_NE(net::auth::mac(key, "x", "ctx", a, b), net::auth::mac(key, "y", "ctx", a, b));
  EXPECT_NE(net::auth::mac(key, "x", "ctx", a, b), net::auth::mac(key, "x", "ctx2", a, b));
  EXPECT_NE(net::auth::mac(key, "x", "ctx", a, b), net::auth::mac(key, "x", "ctx", b, a));
  // A responder's proof is not an initiator's: reflecting a challenge back fails.
  net::auth::Initiator initiator(key, "ctx");
  net::auth::Responder responder(key, "ctx", initiator.nonce().data());
  auto challenge = responder.challenge();
  EXPECT_FALSE(responder.check(challenge.data() + net::auth::kNonceBytes));
  std::optional<net::auth::Mac> proof = initiator.answer(challenge.data());
  ASSERT_TRUE(proof.has_value());
  EXPECT_TRUE(responder.check(proof->data()));
  net::auth::Initiator stranger(other, "ctx");
  EXPECT_FALSE(net::auth::Responder(other, "ctx", initiator.nonce().data()).check(proof->data()));
}

}  // namespace
}  // namespace tdist
