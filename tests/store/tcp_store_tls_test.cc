// TCPStore over mutual TLS (net/tls.h; TlsFiles in the options, certificates from
// TestPki): every request kind with 8 MiB values and parked waits, 64 clients at once,
// pipelined requests whose replies pass the read pause, TLS with a token; and the
// refusals: a stranger's or an expired certificate (AuthError, while the others are
// served and the keys are intact), a server the client does not trust, a client without
// TLS against a TLS server and the reverse (a clear error, quickly), and connections that
// never finish their handshake (closed after TDIST_STORE_FRAME_TIMEOUT).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/fd.h"
#include "net/socket.h"
#include "net/tls.h"
#include "store/tcp_store_protocol.h"
#include "store/tcp_store_test_util.h"
#include "support/test_certs.h"
#include "tdist/error.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using namespace std::chrono_literals;
using store_test::closed_by_peer;
using store_test::kShort;
using store_wire::Command;
using store_wire::FrameWriter;
using tdist::testing::TestPki;
using test_support::error_of;

const std::string kToken = "the-job-secret";

TlsFiles files_of(const net::tls::Config& c) { return {c.cert, c.key, c.ca}; }

std::unique_ptr<TCPStoreServer> server_with(const std::optional<TlsFiles>& tls,
                                            const std::string& token = "") {
  return TCPStoreServer::start("127.0.0.1", 0, token, tls);
}

std::unique_ptr<TCPStore> client_with(uint16_t port, const TlsFiles& tls,
                                      const std::string& token = "") {
  TCPStoreOptions o = store_test::client_options(port);
  o.tls = tls;
  o.auth_token = token;
  return std::make_unique<TCPStore>("127.0.0.1", o);
}

Bytes pattern(size_t size, uint8_t seed) {
  Bytes b(size);
  std::iota(b.begin(), b.end(), seed);
  return b;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A raw TLS connection speaking frames by hand (to pipeline requests).
class RawTls {
 public:
  RawTls(uint16_t port, const net::tls::Config& config)
      : fd_(net::connect_tcp("127.0.0.1", port, Deadline::after(kShort))),
        session_(net::tls::Context::get(config), fd_.get(), net::tls::Role::kClient) {
    net::tls::handshake(session_, Deadline::after(kShort), "server");
  }
  void send(const std::vector<uint8_t>& bytes) {
    net::tls::write_full(session_, bytes.data(), bytes.size(), Deadline::after(kShort), "server");
  }
  // The next frame's header; its payload in `payload`.
  store_wire::FrameHeader next(std::vector<uint8_t>* payload) {
    uint8_t header[store_wire::kHeaderBytes];
    net::tls::read_full(session_, header, sizeof(header), Deadline::after(kShort), "server");
    const store_wire::FrameHeader h = store_wire::decode_header(header);
    payload->resize(h.payload_size());
    net::tls::read_full(session_, payload->data(), payload->size(), Deadline::after(kShort),
                        "server");
    return h;
  }

 private:
  net::Fd fd_;
  net::tls::Session session_;
};

class TCPStoreTls : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = server_with(files_of(pki_.config("server")));
    good_ = client(pki_.config("good"));
    good_->set("before", std::string_view("1"));
  }
  std::unique_ptr<TCPStore> client(const net::tls::Config& config) {
    return client_with(server_->port(), files_of(config));
  }
  // The TLS client still works, and the keys are as they were.
  void expect_unharmed() {
    EXPECT_EQ(to_string(good_->get("before", Deadline::after(kShort))), "1");
    EXPECT_EQ(good_->num_keys(), 1);
    EXPECT_EQ(client(pki_.config("later"))->add("before", 1), 2);
  }

  TestPki pki_;
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStore> good_;
};

TEST_F(TCPStoreTls, EveryRequestWorksWithLargeValues) {
  auto other = client(pki_.config("other"));
  const Bytes big = pattern(8 << 20, 3);  // many TLS records each way
  good_->set("big", big);
  EXPECT_EQ(other->get("big", Deadline::after(kShort)), big);
  EXPECT_EQ(other->add("n", 5), 5);
  EXPECT_EQ(good_->add("n", -2), 3);
  EXPECT_EQ(good_->compare_set("big", big, to_bytes("small")), to_bytes("small"));
  EXPECT_EQ(to_string(other->compare_set("big", to_bytes("wrong"), big)), "small");
  other->append("before", to_bytes("23"));
  EXPECT_EQ(to_string(good_->get("before", Deadline::after(kShort))), "123");
  other->multi_set({"m1", "m2"}, {big, to_bytes("two")});
  std::vector<Bytes> got = good_->multi_get({"m1", "m2"}, Deadline::after(kShort));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(to_string(got[1]), "two");
  EXPECT_TRUE(good_->check({"m1", "m2", "n"}));
  EXPECT_TRUE(other->delete_key("m2"));
  EXPECT_FALSE(good_->check({"m2"}));
  EXPECT_EQ(good_->num_keys(), 4);  // before, big, n, m1
}

TEST_F(TCPStoreTls, ParkedWaitsAreWokenByAnotherClient) {
  const Bytes big = pattern(8 << 20, 11);
  auto getter = std::async(std::launch::async, [&] {
    auto c = client(pki_.config("getter"));
    return c->get("late", Deadline::after(kShort));
  });
  auto multi = std::async(std::launch::async, [&] {
    auto c = client(pki_.config("multi"));
    return c->multi_get({"late", "later"}, Deadline::after(kShort));
  });
  auto waiter = std::async(std::launch::async, [&] {
    auto c = client(pki_.config("waiter"));
    c->wait({"late", "later"}, Deadline::after(kShort));
  });
  std::this_thread::sleep_for(200ms);  // all three parked (or about to be)
  good_->set("late", big);
  EXPECT_EQ(getter.get(), big);
  good_->set("later", std::string_view("x"));
  waiter.get();
  std::vector<Bytes> got = multi.get();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(to_string(got[1]), "x");
}

TEST_F(TCPStoreTls, SixtyFourClientsAtOnce) {
  constexpr int kClients = 64;
  const net::tls::Config config = pki_.config("many");
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < kClients; ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      auto c = client(config);
      c->set("key" + std::to_string(i), std::to_string(i));
      c->add("count", 1);
      c->wait({"count-done"}, Deadline::after(kShort));  // all 64 connected at once
      return to_string(c->get("key" + std::to_string(i), Deadline::after(kShort)));
    }));
  }
  const Deadline deadline = Deadline::after(kShort);
  while (good_->add("count", 0) < kClients && !deadline.expired()) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(good_->add("count", 0), kClients);
  good_->set("count-done", std::string_view("1"));
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(results[i].get(), std::to_string(i));
}

TEST_F(TCPStoreTls, PipelinedRepliesOverTheReadPauseAreAllAnswered) {
  // 12 GETs of 8 MiB (96 MiB of replies, over the 64 MiB that pause reading a connection),
  // each followed by a SET of 1000 bytes and an ADD, sent in one write (one TLS record of
  // 12.5 KiB) before any reply is read: the server stops reading and parsing this
  // connection with the rest of the record possibly inside its session and nothing left
  // on the socket, and must resume it (its session first) as the replies drain.
  const Bytes big = pattern(8 << 20, 5);
  good_->set("big", big);
  RawTls raw(server_->port(), pki_.config("raw"));
  std::vector<uint8_t> requests;
  constexpr uint32_t kGets = 12;
  for (uint32_t i = 0; i < kGets; ++i) {
    FrameWriter(requests, static_cast<uint8_t>(Command::kGet), 3 * i + 1)
        .bytes(std::string_view("big"))
        .finish();
    FrameWriter(requests, static_cast<uint8_t>(Command::kSet), 3 * i + 2)
        .bytes(std::string_view("pad" + std::to_string(i)))
        .bytes(std::string(1000, 'p'))
        .finish();
    FrameWriter(requests, static_cast<uint8_t>(Command::kAdd), 3 * i + 3)
        .bytes(std::string_view("pipelined"))
        .i64(1)
        .finish();
  }
  raw.send(requests);
  std::vector<uint8_t> payload;
  for (uint32_t i = 0; i < kGets; ++i) {
    store_wire::FrameHeader h = raw.next(&payload);
    ASSERT_EQ(h.request_id, 3 * i + 1);
    ASSERT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kOk));
    store_wire::PayloadReader get(payload, store_wire::Limits{1 << 20, 1 << 30});
    ASSERT_EQ(get.value(), big) << "GET " << i;
    h = raw.next(&payload);
    ASSERT_EQ(h.request_id, 3 * i + 2);
    ASSERT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kOk));
    h = raw.next(&payload);
    ASSERT_EQ(h.request_id, 3 * i + 3);
    store_wire::PayloadReader add(payload, store_wire::Limits{1 << 20, 1 << 30});
    EXPECT_EQ(add.i64(), int64_t{i} + 1);
  }
  EXPECT_EQ(good_->add("pipelined", 0), kGets);
  EXPECT_EQ(good_->get("pad11", Deadline::after(kShort)).size(), 1000u);
}

TEST(TCPStoreTlsToken, ATokenIsCheckedInsideTls) {
  TestPki pki;
  auto server = server_with(files_of(pki.config("server")), kToken);
  auto good = client_with(server->port(), files_of(pki.config("a")), kToken);
  good->set("k", std::string_view("v"));
  std::string what = error_of<AuthError>(
      [&] { client_with(server->port(), files_of(pki.config("b")), "not-the-secret"); });
  EXPECT_NE(what.find("authentication token"), std::string::npos) << what;
  auto tokenless = client_with(server->port(), files_of(pki.config("c")));
  what = error_of<PeerError>([&] { tokenless->set("intruder", std::string_view("x")); });
  EXPECT_NE(what.find("authentication required"), std::string::npos) << what;
  EXPECT_EQ(to_string(good->get("k", Deadline::after(kShort))), "v");
  EXPECT_FALSE(good->check({"intruder"}));
}

TEST_F(TCPStoreTls, AStrangersCertificateIsRefused) {
  const auto start = std::chrono::steady_clock::now();
  std::string what = error_of<AuthError>([&] {
    auto stranger = client(pki_.stranger());
    stranger->set("intruder", std::string_view("x"));  // TLS 1.3: refused on its first read
  });
  EXPECT_NE(what.find("refused this process's TLS certificate"), std::string::npos) << what;
  EXPECT_NE(what.find("TDIST_TLS_CERT"), std::string::npos) << what;
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_FALSE(good_->check({"intruder"}));
  expect_unharmed();
}

TEST_F(TCPStoreTls, AnExpiredCertificateIsRefused) {
  std::string what = error_of<AuthError>([&] {
    auto old = client(pki_.expired("old"));
    old->set("intruder", std::string_view("x"));
  });
  EXPECT_NE(what.find("certificate"), std::string::npos) << what;
  expect_unharmed();
}

TEST_F(TCPStoreTls, AServerTheClientDoesNotTrustIsRefused) {
  TestPki other;  // its CA signed the server's certificate, not ours
  auto stranger_server = server_with(files_of(other.config("server")));
  std::string what = error_of<AuthError>(
      [&] { client_with(stranger_server->port(), files_of(pki_.config("a"))); });
  EXPECT_NE(what.find("certificate"), std::string::npos) << what;
  expect_unharmed();
}

TEST_F(TCPStoreTls, AClientWithoutTlsIsToldTheStoreRequiresTls) {
  const auto start = std::chrono::steady_clock::now();
  auto plain = client_with(server_->port(), TlsFiles{});
  std::string what = error_of<PeerError>([&] { plain->set("intruder", std::string_view("x")); });
  EXPECT_NE(what.find("this store requires TLS"), std::string::npos) << what;
  EXPECT_NE(what.find("TDIST_TLS_CERT"), std::string::npos) << what;
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_FALSE(good_->check({"intruder"}));
  expect_unharmed();
}

TEST(TCPStoreTlsMismatch, ATlsClientAgainstAServerWithoutTlsIsRefused) {
  TestPki pki;
  auto server = server_with(TlsFiles{});
  auto plain = client_with(server->port(), TlsFiles{});
  plain->set("k", std::string_view("v"));
  const auto start = std::chrono::steady_clock::now();
  std::string what =
      error_of<AuthError>([&] { client_with(server->port(), files_of(pki.config("a"))); });
  EXPECT_NE(what.find("TLS"), std::string::npos) << what;
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(to_string(plain->get("k", Deadline::after(kShort))), "v");
}

// A plain frame whose 32-bit length begins 16 03 01 (66,326 bytes and a few others) starts
// like a TLS record; its version byte tells the server it is not one.
TEST(TCPStoreTlsMismatch, APlainFirstFrameThatBeginsLikeTlsIsServed) {
  auto server = server_with(TlsFiles{});
  constexpr size_t kTlsLikeLength = 0x00010316;
  // Fresh clients, whose first frame is the SET: one of these sizes makes its length exactly
  // kTlsLikeLength, whatever the key's and the value's framing cost.
  for (size_t value = kTlsLikeLength - 64; value <= kTlsLikeLength; ++value) {
    auto plain = client_with(server->port(), TlsFiles{});
    const std::string v(value, 'x');
    plain->set("k", std::string_view(v));
    ASSERT_EQ(to_string(plain->get("k", Deadline::after(kShort))).size(), value);
  }
}

TEST(TCPStoreTlsSettings, TlsFilesMustBeAllOrNothingAndLoadable) {
  TestPki pki;
  const net::tls::Config a = pki.config("a");
  std::string what = error_of<InvalidArgument>([&] { server_with(TlsFiles{a.cert, "", a.ca}); });
  EXPECT_NE(what.find("or none"), std::string::npos) << what;
  what = error_of<InvalidArgument>([&] {
    server_with(TlsFiles{a.cert, a.key, pki.dir() + "/missing.pem"});
  });
  EXPECT_NE(what.find("missing.pem"), std::string::npos) << what;
  // From the settings by default, for the server and its clients alike.
  ::setenv("TDIST_TLS_CERT", a.cert.c_str(), 1);
  ::setenv("TDIST_TLS_KEY", a.key.c_str(), 1);
  ::setenv("TDIST_TLS_CA", a.ca.c_str(), 1);
  auto server = server_with(std::nullopt);
  TCPStoreOptions o = store_test::client_options(server->port());
  auto from_settings = std::make_unique<TCPStore>("127.0.0.1", o);
  ::unsetenv("TDIST_TLS_CERT");
  ::unsetenv("TDIST_TLS_KEY");
  ::unsetenv("TDIST_TLS_CA");
  from_settings->set("k", std::string_view("v"));
  EXPECT_EQ(to_string(client_with(server->port(), files_of(pki.config("b")))
                          ->get("k", Deadline::after(kShort))),
            "v");
}

TEST(TCPStoreTlsTimeout, AConnectionThatNeverFinishesItsHandshakeIsClosed) {
  TestPki pki;
  ::setenv("TDIST_STORE_FRAME_TIMEOUT", "0.5", 1);
  auto server = server_with(files_of(pki.config("server")));
  ::unsetenv("TDIST_STORE_FRAME_TIMEOUT");
  const auto start = std::chrono::steady_clock::now();
  net::Fd silent = net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort));
  net::Fd halfway = net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort));
  const uint8_t record_start[] = {0x16, 0x03};  // the start of a handshake, then nothing
  ASSERT_EQ(::send(halfway.get(), record_start, sizeof(record_start), MSG_NOSIGNAL), 2);
  auto good = client_with(server->port(), files_of(pki.config("a")));
  good->set("k", std::string_view("v"));  // served meanwhile
  EXPECT_TRUE(closed_by_peer(silent.get(), Deadline::after(5s)));
  EXPECT_TRUE(closed_by_peer(halfway.get(), Deadline::after(5s)));
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 0.4);
  EXPECT_LT(waited, 4.0);
  EXPECT_EQ(to_string(good->get("k", Deadline::after(kShort))), "v");
}

}  // namespace
}  // namespace tdist
