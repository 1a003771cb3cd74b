// net/tls.h: mutual TLS sessions over socket pairs, with certificates made by the test.
#include "net/tls.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <future>
#include <numeric>
#include <string>
#include <vector>

#include "net/fd.h"
#include "support/test_certs.h"
#include "tdist/error.h"

namespace tdist::net::tls {
namespace {

using tdist::testing::TestPki;

struct Pair {
  Fd a;
  Fd b;
};

Pair socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  return {Fd(fds[0]), Fd(fds[1])};
}

// "" when f() returns, else the error's kind and text ("AuthError: ...").
template <typename F>
std::string outcome(F&& f) {
  try {
    f();
  } catch (const AuthError& e) {
    return std::string("AuthError: ") + e.what();
  } catch (const PeerError& e) {
    return std::string("PeerError: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "";
}

Deadline soon() { return Deadline::after(std::chrono::seconds(10)); }

// Handshakes client (a) and server (b) concurrently; returns each side's error ("" = ok).
std::pair<std::string, std::string> handshake_both(Session& client, Session& server) {
  auto other = std::async(std::launch::async,
                          [&] { return outcome([&] { handshake(server, soon(), "client"); }); });
  std::string mine = outcome([&] { handshake(client, soon(), "server"); });
  std::string theirs = other.get();
  // TLS 1.3: the client learns that the server refused its certificate on its first read.
  if (mine.empty() && !theirs.empty()) {
    uint8_t byte = 0;
    mine = outcome([&] { read_full(client, &byte, 1, soon(), "server"); });
  }
  return {mine, theirs};
}

TEST(Tls, MembersOfOneCaTalkBothWays) {
  TestPki pki;
  Pair p = socket_pair();
  Session client(Context::get(pki.config("a")), p.a.get(), Role::kClient);
  Session server(Context::get(pki.config("b")), p.b.get(), Role::kServer);
  auto [c, s] = handshake_both(client, server);
  ASSERT_EQ(c, "");
  ASSERT_EQ(s, "");
  // 3 MiB each way at once: more than the socket buffers, so both sides must interleave.
  std::vector<uint8_t> out(3 << 20), in(out.size()), back(out.size());
  std::iota(out.begin(), out.end(), uint8_t{7});
  auto echo = std::async(std::launch::async, [&] {
    std::vector<uint8_t> got(out.size());
    read_full(server, got.data(), got.size(), soon(), "client");
    write_full(server, got.data(), got.size(), soon(), "client");
  });
  write_full(client, out.data(), out.size(), soon(), "server");
  read_full(client, back.data(), back.size(), soon(), "server");
  echo.get();
  EXPECT_EQ(back, out);
}

TEST(Tls, AStrangersCertificateIsRefusedOnBothSides) {
  TestPki pki;
  Pair p = socket_pair();
  Session client(Context::get(pki.stranger()), p.a.get(), Role::kClient);
  Session server(Context::get(pki.config("b")), p.b.get(), Role::kServer);
  // The stranger trusts the job's CA (its ca.pem), but the job does not trust its CA.
  auto [c, s] = handshake_both(client, server);
  EXPECT_NE(s.find("AuthError"), std::string::npos) << s;
  EXPECT_NE(s.find("certificate"), std::string::npos) << s;
  EXPECT_NE(c.find("AuthError"), std::string::npos) << c;  // told by the server's alert
  EXPECT_NE(c.find("certificate was refused"), std::string::npos) << c;
}

TEST(Tls, AServerWithAStrangersCertificateIsRefused) {
  TestPki pki;
  Pair p = socket_pair();
  Session client(Context::get(pki.config("a")), p.a.get(), Role::kClient);
  Session server(Context::get(pki.stranger()), p.b.get(), Role::kServer);
  auto [c, s] = handshake_both(client, server);
  EXPECT_NE(c.find("AuthError"), std::string::npos) << c;
  EXPECT_NE(c.find("unable to get local issuer certificate"), std::string::npos) << c;
  EXPECT_NE(s, "");
}

TEST(Tls, AnExpiredCertificateIsRefused) {
  TestPki pki;
  Pair p = socket_pair();
  Session client(Context::get(pki.expired("old")), p.a.get(), Role::kClient);
  Session server(Context::get(pki.config("b")), p.b.get(), Role::kServer);
  auto [c, s] = handshake_both(client, server);
  EXPECT_NE(s.find("certificate has expired"), std::string::npos) << s;
  EXPECT_NE(c.find("AuthError"), std::string::npos) << c;
}

TEST(Tls, APlaintextPeerFailsTheHandshakeAndIsRecognised) {
  TestPki pki;
  Pair p = socket_pair();
  Session server(Context::get(pki.config("b")), p.b.get(), Role::kServer);
  const char hello[] = "tdist hello, no TLS here";
  ASSERT_EQ(::send(p.a.get(), hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  std::string s = outcome([&] { handshake(server, soon(), "client"); });
  EXPECT_NE(s.find("AuthError"), std::string::npos) << s;
  EXPECT_NE(s.find("TDIST_TLS_CERT"), std::string::npos) << s;
  EXPECT_FALSE(looks_like_tls(reinterpret_cast<const uint8_t*>(hello)));

  // What a TLS client sends first is recognised as TLS.
  Pair q = socket_pair();
  Session client(Context::get(pki.config("a")), q.a.get(), Role::kClient);
  EXPECT_EQ(client.handshake(), Session::Status::kWantRead);
  uint8_t first[3];
  ASSERT_EQ(::recv(q.b.get(), first, 3, 0), 3);
  EXPECT_TRUE(looks_like_tls(first));
}

TEST(Tls, APeerThatClosesIsAPeerErrorNotASignal) {
  TestPki pki;
  Pair p = socket_pair();
  Session client(Context::get(pki.config("a")), p.a.get(), Role::kClient);
  Session server(Context::get(pki.config("b")), p.b.get(), Role::kServer);
  auto [c, s] = handshake_both(client, server);
  ASSERT_EQ(c + s, "");
  server.shutdown();
  p.b.reset();
  uint8_t byte = 0;
  EXPECT_NE(outcome([&] { read_full(client, &byte, 1, soon(), "server"); }).find("PeerError"),
            std::string::npos);
  std::vector<uint8_t> big(1 << 20);
  EXPECT_NE(outcome([&] {
              write_full(client, big.data(), big.size(), soon(), "server");
            }).find("PeerError"),
            std::string::npos);
}

TEST(Tls, SettingsAreAllOrNothingAndFilesAreChecked) {
  TestPki pki;
  net::tls::Config good = pki.config("a");
  ::setenv("TDIST_TLS_CERT", good.cert.c_str(), 1);
  ::unsetenv("TDIST_TLS_KEY");
  ::unsetenv("TDIST_TLS_CA");
  std::string e = outcome([] { config_from_settings(); });
  EXPECT_NE(e.find("TDIST_TLS_KEY"), std::string::npos) << e;
  ::setenv("TDIST_TLS_KEY", good.key.c_str(), 1);
  ::setenv("TDIST_TLS_CA", good.ca.c_str(), 1);
  EXPECT_TRUE(Context::from_settings() != nullptr);
  ::unsetenv("TDIST_TLS_CERT");
  ::unsetenv("TDIST_TLS_KEY");
  ::unsetenv("TDIST_TLS_CA");
  EXPECT_TRUE(Context::from_settings() == nullptr);

  // A key others can read; a key that is not the certificate's; a missing CA file.
  ::chmod(good.key.c_str(), 0644);
  e = outcome([&] { Context c(good); });
  EXPECT_NE(e.find("chmod 600"), std::string::npos) << e;
  ::chmod(good.key.c_str(), 0600);
  net::tls::Config other = pki.config("b");
  e = outcome([&] { Context c({good.cert, other.key, good.ca}); });
  EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
  e = outcome([&] { Context c({good.cert, good.key, pki.dir() + "/none.pem"}); });
  EXPECT_NE(e.find("TDIST_TLS_CA"), std::string::npos) << e;
}

}  // namespace
}  // namespace tdist::net::tls
