// Authentication of transport connections (transport/auth_exchange.h) over every
// transport: ranks as forked processes with their own TDIST_AUTH_TOKEN meet over a
// FileStore. The same token connects; a wrong or missing token on either side fails fast
// with AuthError on the connecting rank instead of a connection; the exchange itself,
// over socket pairs, refuses a replayed handshake and a wrong proof.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "net/fd.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "transport/auth_exchange.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kConnected = 0;
constexpr int kAuthFailed = 7;
constexpr int kTimedOut = 8;
constexpr int kOtherError = 9;

class TransportAuthTest : public CommTest {
 protected:
  // Forks ranks 0 and 1 with the given tokens ("" = none); each connects, exchanges one
  // message, and exits with kConnected, or the kind of error it got.
  // `setup`: the setup deadline (rank 0 waits that long for a connection that is refused).
  std::vector<int> run_pair(const std::string& token0, const std::string& token1,
                            std::chrono::milliseconds setup = 2s) const {
    StorePath store;
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string token = rank == 0 ? token0 : token1;
      pids.push_back(fork_child([&, rank, token, setup] {
        if (token.empty()) {
          ::unsetenv("TDIST_AUTH_TOKEN");
        } else {
          ::setenv("TDIST_AUTH_TOKEN", token.c_str(), 1);
        }
        CommTestOptions options;
        options.setup_timeout = setup;
        try {
          auto comm = connect(std::make_shared<FileStore>(store.path()), rank, 2, options);
          uint32_t out = 42 + static_cast<uint32_t>(rank), in = 0;
          auto r = comm->irecv(1 - rank, p2p_tag(0), &in, sizeof(in));
          auto s = comm->isend(1 - rank, p2p_tag(0), &out, sizeof(out));
          s->wait(op_deadline());
          r->wait(op_deadline());
          return in == 43u - static_cast<uint32_t>(rank) ? kConnected : kOtherError;
        } catch (const AuthError& e) {
          std::fprintf(stderr, "rank %d: AuthError: %s\n", rank, e.what());
          return kAuthFailed;
        } catch (const TimeoutError& e) {
          return kTimedOut;
        } catch (const PeerError& e) {
          // Lazy connections (tcp/lazy_mesh.h) meet at the first exchange: the refusal
          // comes as the pair's connection failing with the AuthError's words.
          std::fprintf(stderr, "rank %d: PeerError: %s\n", rank, e.what());
          const std::string what = e.what();
          const bool refused = what.find("never connected") != std::string::npos &&
                               (what.find("token") != std::string::npos ||
                                what.find("authenticat") != std::string::npos);
          return refused ? kAuthFailed : kOtherError;
        }
      }));
    }
    return wait_children(pids);
  }
};

TEST_P(TransportAuthTest, TheSameTokenConnects) {
  EXPECT_EQ(run_pair("job-secret", "job-secret", 20s), (std::vector<int>{kConnected, kConnected}));
}

// The rank that connects (rank 1, the higher one) fails with the refusal, and rank 0 does
// not connect. With lazy connections (tcp_lazy) either rank may dial first: the one whose
// dial is refused fails with the refusal's words, and the other may only learn that its
// peer is gone (it exits after its refusal), so one of the two carries the refusal.
void expect_refused(const std::vector<int>& codes, const std::string& factory) {
  EXPECT_NE(codes[0], kConnected);
  EXPECT_NE(codes[1], kConnected);
  if (factory == "tcp_lazy") {
    EXPECT_TRUE(codes[0] == kAuthFailed || codes[1] == kAuthFailed) << codes[0] << " " << codes[1];
  } else {
    EXPECT_EQ(codes[1], kAuthFailed);
  }
}

TEST_P(TransportAuthTest, AWrongTokenIsRefused) {
  expect_refused(run_pair("job-secret", "another-secret"), GetParam().name);
}

TEST_P(TransportAuthTest, ARankWithoutTheTokenIsRefused) {
  expect_refused(run_pair("job-secret", ""), GetParam().name);
}

TEST_P(TransportAuthTest, ATokenIsRefusedByARankWithout) {
  expect_refused(run_pair("", "job-secret"), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportAuthTest, ::testing::ValuesIn(comm_factories()),
                         factory_case_name);

// One exchange over a socket pair: the initiator on a thread, the responder polled here.
struct Pair {
  net::Fd a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    a = net::Fd(fds[0]);
    b = net::Fd(fds[1]);
  }
};

AuthResponder::State respond(AuthResponder& responder, int fd) {
  const Deadline deadline = Deadline::after(5s);
  AuthResponder::State state = AuthResponder::State::kMore;
  while (state == AuthResponder::State::kMore && !deadline.expired()) {
    state = responder.progress(fd, deadline);
    if (state == AuthResponder::State::kMore) std::this_thread::sleep_for(1ms);
  }
  return state;
}

TEST(AuthExchangeTest, ProvesBothWays) {
  const net::auth::Key key("secret");
  Pair p;
  std::thread initiator(
      [&] { authenticate_initiator(p.a.get(), key, "test", Deadline::after(5s), "peer"); });
  AuthResponder responder(key, "test", 24);
  EXPECT_EQ(respond(responder, p.b.get()), AuthResponder::State::kAccepted);
  initiator.join();
}

TEST(AuthExchangeTest, AReplayedHandshakeIsRefused) {
  const net::auth::Key key("secret");
  // A genuine exchange: the initiator's hello (its nonce) and its proof are what a listener
  // on the wire would record.
  net::auth::Initiator initiator(key, "test");
  net::auth::Responder genuine(key, "test", initiator.nonce().data());
  std::optional<net::auth::Mac> proof = initiator.answer(genuine.challenge().data());
  ASSERT_TRUE(proof.has_value());
  EXPECT_TRUE(genuine.check(proof->data()));

  // The same bytes, sent again to a fresh responder: its new challenge makes the old proof
  // worthless.
  uint8_t hello[kAuthHelloBytes] = {'t', 'd', 'A', 'U', 1, 0};
  std::memcpy(hello + 8, initiator.nonce().data(), net::auth::kNonceBytes);
  Pair replay;
  ASSERT_EQ(::send(replay.a.get(), hello, sizeof(hello), MSG_NOSIGNAL), ssize_t{kAuthHelloBytes});
  ASSERT_EQ(::send(replay.a.get(), proof->data(), proof->size(), MSG_NOSIGNAL),
            ssize_t{net::auth::kMacBytes});
  AuthResponder fresh(key, "test", 24);
  EXPECT_EQ(respond(fresh, replay.b.get()), AuthResponder::State::kRefused);
  EXPECT_NE(fresh.why().find("wrong authentication token"), std::string::npos) << fresh.why();
}

TEST(AuthExchangeTest, AHelloWithoutAuthenticationIsRefusedWithAMarker) {
  const net::auth::Key key("secret");
  Pair p;
  uint8_t hello[24] = {'t', 'd', 'C', 'T'};
  ASSERT_EQ(::send(p.a.get(), hello, sizeof(hello), MSG_NOSIGNAL), 24);
  AuthResponder responder(key, "test", 24);
  EXPECT_EQ(respond(responder, p.b.get()), AuthResponder::State::kRefused);
  uint8_t reply[24] = {};
  ASSERT_EQ(::recv(p.a.get(), reply, sizeof(reply), 0), 24);
  EXPECT_TRUE(is_refusal(reply));
}

TEST(AuthExchangeTest, AWrongKeyFailsOnTheInitiatorFirst) {
  Pair p;
  std::string error;
  std::thread initiator([&] {
    try {
      authenticate_initiator(p.a.get(), net::auth::Key("mine"), "test", Deadline::after(5s),
                             "rank 0");
    } catch (const AuthError& e) {
      error = e.what();
    }
    p.a.reset();
  });
  const net::auth::Key theirs("theirs");
  AuthResponder responder(theirs, "test", 24);
  EXPECT_EQ(respond(responder, p.b.get()), AuthResponder::State::kRefused);
  initiator.join();
  EXPECT_NE(error.find("rank 0 does not know this job's authentication token"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace tdist::transport::testing
