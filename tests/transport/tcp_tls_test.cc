// Mutual TLS on the TCP transport (tcp_comm.h with TcpCommOptions::tls): ranks as forked
// processes over a FileStore, with certificates of a test CA (support/test_certs.h).
// Members of the CA exchange small and large messages (2 and 3 ranks, one and two sockets
// per peer, with a token inside TLS too); a wrong token inside TLS, a rank without TLS
// among TLS ranks (as the lower and as the higher rank, with and without tokens), a
// stranger's or an expired certificate fail fast with AuthError instead of a timeout; a
// peer killed mid-stream is a PeerError within seconds.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm_conformance.h"
#include "support/test_certs.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;
using tdist::testing::TestPki;

constexpr int kOk = 0;
constexpr int kWrongData = 6;
constexpr int kAuthFailed = 7;
constexpr int kTimedOut = 8;
constexpr int kPeerFailed = 10;

// How one rank is configured.
struct RankSetup {
  std::optional<net::tls::Config> tls;  // none: plain TCP
  std::string token;                    // "" = none
  int nsocks = 1;
  size_t socket_buffer_bytes = 0;  // 0: TcpCommOptions' default
  bool lazy = false;               // TcpCommOptions::lazy: connect at the first exchange
};

struct Outcome {
  int code = -1;        // kOk, a failure code, or -signal when it was killed
  std::string message;  // the error's text
  double seconds = 0;   // from the fork to the exit
};

// Forks one process per rank; each connects with its setup and runs body(comm) (its exit
// code), or exits with the kind of error it got. Waits for the ranks in `awaited` (all
// when empty), then kills the others (ranks left waiting for a peer that gave up).
std::vector<Outcome> run_ranks(const std::vector<RankSetup>& setups,
                               const std::function<int(Comm&)>& body,
                               std::chrono::milliseconds setup_timeout = 20s,
                               std::vector<int> awaited = {}) {
  const int world = static_cast<int>(setups.size());
  if (awaited.empty()) {
    for (int r = 0; r < world; ++r) awaited.push_back(r);
  }
  StorePath store;
  const std::string outcome_dir = store.path() + ".outcome";
  std::map<pid_t, int> rank_of;
  std::vector<pid_t> pids;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < world; ++rank) {
    const RankSetup setup = setups[static_cast<size_t>(rank)];
    const std::string outcome_file = outcome_dir + std::to_string(rank);
    pid_t pid = fork_child([&, rank, setup, outcome_file] {
      if (setup.token.empty()) {
        ::unsetenv("TDIST_AUTH_TOKEN");
      } else {
        ::setenv("TDIST_AUTH_TOKEN", setup.token.c_str(), 1);
      }
      auto report = [&](int code, const std::string& what) {
        std::ofstream(outcome_file) << what;
        std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
        return code;
      };
      TcpCommOptions options;
      options.timeout = setup_timeout;
      options.nsocks_per_peer = setup.nsocks;
      if (setup.socket_buffer_bytes > 0) options.socket_buffer_bytes = setup.socket_buffer_bytes;
      options.lazy = setup.lazy;
      options.tls = setup.tls ? net::tls::Context::get(*setup.tls) : nullptr;
      try {
        auto comm =
            connect_tcp_comm(std::make_shared<FileStore>(store.path()), rank, world, options);
        return body(*comm);
      } catch (const AuthError& e) {
        return report(kAuthFailed, std::string("AuthError: ") + e.what());
      } catch (const TimeoutError& e) {
        return report(kTimedOut, std::string("TimeoutError: ") + e.what());
      } catch (const PeerError& e) {
        return report(kPeerFailed, std::string("PeerError: ") + e.what());
      }
    });
    rank_of[pid] = rank;
    pids.push_back(pid);
  }
  std::vector<Outcome> outcomes(static_cast<size_t>(world));
  std::vector<bool> done(static_cast<size_t>(world), false);
  auto reap = [&](pid_t pid, int status) {
    const int rank = rank_of.at(pid);
    Outcome& o = outcomes[static_cast<size_t>(rank)];
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::ifstream in(outcome_dir + std::to_string(rank));
    std::stringstream text;
    text << in.rdbuf();
    o.message = text.str();
    std::remove((outcome_dir + std::to_string(rank)).c_str());
    done[static_cast<size_t>(rank)] = true;
  };
  auto all_awaited_done = [&] {
    for (int r : awaited) {
      if (!done[static_cast<size_t>(r)]) return false;
    }
    return true;
  };
  while (!all_awaited_done()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    if (rank_of.count(pid) != 0) reap(pid, status);
  }
  for (int r = 0; r < world; ++r) {
    if (done[static_cast<size_t>(r)]) continue;
    ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    int status = 0;
    ::waitpid(pids[static_cast<size_t>(r)], &status, 0);
    reap(pids[static_cast<size_t>(r)], status);
  }
  return outcomes;
}

// Every rank sends every other rank, at once: `count` small messages of 1..200 bytes,
// then one of `large` bytes; all with checked contents.
int exchange(Comm& comm, int count, size_t large) {
  const int me = comm.rank();
  std::vector<RequestPtr> requests;
  std::vector<std::vector<uint8_t>> sent, received;
  std::vector<uint64_t> seeds;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == me) continue;
    for (int k = 0; k <= count; ++k) {
      const size_t bytes = k < count ? 1 + static_cast<size_t>(k * 37 % 200) : large;
      const uint64_t out_seed = (uint64_t(me) << 40) | (uint64_t(peer) << 20) | uint64_t(k);
      const uint64_t in_seed = (uint64_t(peer) << 40) | (uint64_t(me) << 20) | uint64_t(k);
      received.emplace_back(bytes);
      seeds.push_back(in_seed);
      requests.push_back(
          comm.irecv(peer, p2p_tag(static_cast<uint32_t>(k)), received.back().data(), bytes));
      sent.push_back(pattern(out_seed, bytes));
    }
  }
  // Every receive is posted before the first send.
  size_t index = 0;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == me) continue;
    for (int k = 0; k <= count; ++k, ++index) {
      requests.push_back(comm.isend(peer, p2p_tag(static_cast<uint32_t>(k)), sent[index].data(),
                                    sent[index].size()));
    }
  }
  for (const RequestPtr& r : requests) r->wait(op_deadline());
  for (size_t i = 0; i < received.size(); ++i) {
    if (received[i] != pattern(seeds[i], received[i].size())) return kWrongData;
  }
  return kOk;
}

class TcpTlsTest : public ::testing::Test {
 protected:
  RankSetup member(const std::string& name, const std::string& token = "") {
    return RankSetup{pki_.config(name), token};
  }
  static RankSetup plain(const std::string& token = "") { return RankSetup{std::nullopt, token}; }

  TestPki pki_;
};

std::vector<int> codes(const std::vector<Outcome>& outcomes) {
  std::vector<int> c;
  for (const Outcome& o : outcomes) c.push_back(o.code);
  return c;
}

TEST_F(TcpTlsTest, TwoRanksExchangeSmallAndLargeMessagesBothWaysAtOnce) {
  auto outcomes = run_ranks({member("a"), member("b")},
                            [](Comm& comm) { return exchange(comm, 50, size_t{6} << 20); });
  EXPECT_EQ(codes(outcomes), (std::vector<int>{kOk, kOk}));
}

// The channel seals frames into its send buffer (tls_channel.h); what a full socket did not
// take stays there after the message was taken whole. Rank 0's 8 MiB message goes to a
// receiver that starts reading late through 64 KiB socket buffers, and rank 0 then only
// waits for the 1-byte answer that rank 1 sends once it has the message: the buffered tail
// must go out with nothing more queued (Channel::holds_unsent), or both wait forever. Also
// through the lazy mesh's channels, which wrap the TLS channel (`lazy`).
std::vector<int> send_then_await_answer(RankSetup a, RankSetup b, bool lazy) {
  a.socket_buffer_bytes = b.socket_buffer_bytes = 64 << 10;
  a.lazy = b.lazy = lazy;
  auto outcomes = run_ranks({a, b}, [](Comm& comm) {
    constexpr size_t kBytes = size_t{8} << 20;
    const uint64_t tag = collective_tag(1, 0);  // eager at every size
    uint8_t answer = 0;
    if (comm.rank() == 0) {
      const std::vector<uint8_t> data = pattern(42, kBytes);
      comm.isend(1, tag, data.data(), data.size())->wait(op_deadline());
      comm.irecv(1, tag + 1, &answer, 1)->wait(Deadline::after(5s));
      return answer == 7 ? kOk : kWrongData;
    }
    std::this_thread::sleep_for(300ms);
    std::vector<uint8_t> data(kBytes);
    comm.irecv(0, tag, data.data(), data.size())->wait(Deadline::after(5s));
    answer = 7;
    comm.isend(0, tag + 1, &answer, 1)->wait(op_deadline());
    return data == pattern(42, kBytes) ? kOk : kWrongData;
  });
  return codes(outcomes);
}

TEST_F(TcpTlsTest, RecordsTheSocketCouldNotTakeGoOutWithNothingMoreQueued) {
  EXPECT_EQ(send_then_await_answer(member("a"), member("b"), /*lazy=*/false),
            (std::vector<int>{kOk, kOk}));
}

TEST_F(TcpTlsTest, RecordsTheSocketCouldNotTakeGoOutThroughLazyChannels) {
  EXPECT_EQ(send_then_await_answer(member("a"), member("b"), /*lazy=*/true),
            (std::vector<int>{kOk, kOk}));
}

TEST_F(TcpTlsTest, ThreeRanksWithTwoSocketsPerPeer) {
  std::vector<RankSetup> setups = {member("a"), member("b"), member("c")};
  for (RankSetup& s : setups) s.nsocks = 2;
  auto outcomes = run_ranks(setups, [](Comm& comm) {
    // Twice: the sockets alternate, and the second round reuses warm sessions.
    for (int round = 0; round < 2; ++round) {
      if (int code = exchange(comm, 20, size_t{3} << 20); code != kOk) return code;
    }
    return kOk;
  });
  EXPECT_EQ(codes(outcomes), (std::vector<int>{kOk, kOk, kOk}));
}

TEST_F(TcpTlsTest, ATokenInsideTlsConnects) {
  auto outcomes = run_ranks({member("a", "job-secret"), member("b", "job-secret")},
                            [](Comm& comm) { return exchange(comm, 5, size_t{2} << 20); });
  EXPECT_EQ(codes(outcomes), (std::vector<int>{kOk, kOk}));
}

// Rank 1 connects to rank 0 and is told; rank 0 never gets a connection (killed).
TEST_F(TcpTlsTest, AWrongTokenInsideTlsIsRefused) {
  auto outcomes = run_ranks({member("a", "job-secret"), member("b", "another-secret")},
                            [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(outcomes[1].code, kAuthFailed) << outcomes[1].message;
  EXPECT_NE(outcomes[1].message.find("authentication token"), std::string::npos)
      << outcomes[1].message;
  EXPECT_LT(outcomes[1].seconds, 10);
  EXPECT_NE(outcomes[0].code, kOk);
}

// The plain rank is the higher one: it connects to the TLS ranks and is told in plain
// bytes that they use TLS.
TEST_F(TcpTlsTest, APlainHigherRankAmongTlsRanksFailsFast) {
  auto outcomes =
      run_ranks({member("a"), member("b"), plain()}, [](Comm&) { return kOk; }, 60s, {2});
  EXPECT_EQ(outcomes[2].code, kAuthFailed) << outcomes[2].message;
  EXPECT_NE(outcomes[2].message.find("uses TLS, and this process does not"), std::string::npos)
      << outcomes[2].message;
  EXPECT_NE(outcomes[2].message.find("TDIST_TLS_CERT"), std::string::npos) << outcomes[2].message;
  EXPECT_LT(outcomes[2].seconds, 10);
}

// The plain rank is the lower one: both TLS ranks connect to it, and their handshakes
// get plain bytes.
TEST_F(TcpTlsTest, APlainLowerRankAmongTlsRanksFailsFast) {
  auto outcomes =
      run_ranks({plain(), member("b"), member("c")}, [](Comm&) { return kOk; }, 60s, {1, 2});
  for (int r : {1, 2}) {
    const Outcome& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.code, kAuthFailed) << r << ": " << o.message;
    EXPECT_NE(o.message.find("TLS handshake refused"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("TDIST_TLS_CERT"), std::string::npos) << o.message;
    EXPECT_LT(o.seconds, 10) << r;
  }
  EXPECT_NE(outcomes[0].code, kOk);
}

// With tokens on both sides, the mismatch shows in the authentication's first bytes.
TEST_F(TcpTlsTest, TlsOnOneSideOnlyFailsFastWithTokensToo) {
  auto plain_connects =
      run_ranks({member("a", "s"), plain("s")}, [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(plain_connects[1].code, kAuthFailed) << plain_connects[1].message;
  EXPECT_NE(plain_connects[1].message.find("uses TLS"), std::string::npos)
      << plain_connects[1].message;
  EXPECT_LT(plain_connects[1].seconds, 10);

  auto tls_connects =
      run_ranks({plain("s"), member("b", "s")}, [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(tls_connects[1].code, kAuthFailed) << tls_connects[1].message;
  EXPECT_NE(tls_connects[1].message.find("TDIST_TLS_CERT"), std::string::npos)
      << tls_connects[1].message;
  EXPECT_LT(tls_connects[1].seconds, 10);
}

// TLS 1.3: the stranger finishes its handshake, and learns of the refusal on its first
// read.
TEST_F(TcpTlsTest, AStrangersCertificateIsRefused) {
  auto outcomes =
      run_ranks({member("a"), RankSetup{pki_.stranger()}}, [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(outcomes[1].code, kAuthFailed) << outcomes[1].message;
  EXPECT_NE(outcomes[1].message.find("certificate"), std::string::npos) << outcomes[1].message;
  EXPECT_LT(outcomes[1].seconds, 10);

  // The other way round: the member refuses the stranger's server certificate.
  auto reverse =
      run_ranks({RankSetup{pki_.stranger()}, member("b")}, [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(reverse[1].code, kAuthFailed) << reverse[1].message;
  EXPECT_NE(reverse[1].message.find("certificate"), std::string::npos) << reverse[1].message;
  EXPECT_LT(reverse[1].seconds, 10);
}

TEST_F(TcpTlsTest, AnExpiredCertificateIsRefused) {
  auto outcomes =
      run_ranks({member("a"), RankSetup{pki_.expired("old")}}, [](Comm&) { return kOk; }, 60s, {1});
  EXPECT_EQ(outcomes[1].code, kAuthFailed) << outcomes[1].message;
  EXPECT_LT(outcomes[1].seconds, 10);
}

// Rank 1 streams 1 MiB messages and kills itself with one in flight; rank 0, receiving,
// gets a PeerError within seconds, not its 20 s deadline.
TEST_F(TcpTlsTest, APeerKilledMidStreamIsAPeerErrorQuickly) {
  constexpr size_t kBytes = size_t{1} << 20;
  auto outcomes = run_ranks({member("a"), member("b")}, [](Comm& comm) {
    std::vector<uint8_t> buffer(kBytes, 7);
    if (comm.rank() == 1) {
      for (int i = 0; i < 20; ++i)
        comm.isend(0, p2p_tag(1), buffer.data(), kBytes)->wait(op_deadline());
      auto pending = comm.isend(0, p2p_tag(1), buffer.data(), kBytes);
      std::this_thread::sleep_for(5ms);
      ::raise(SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      while (true) comm.irecv(1, p2p_tag(1), buffer.data(), kBytes)->wait(op_deadline());
    } catch (const PeerError& e) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "rank 0: PeerError after %.2fs: %s\n", s, e.what());
      return kPeerFailed;
    }
  });
  EXPECT_EQ(outcomes[1].code, -SIGKILL);
  EXPECT_EQ(outcomes[0].code, kPeerFailed);
  EXPECT_LT(outcomes[0].seconds, 10);
}

}  // namespace
}  // namespace tdist::transport::testing
