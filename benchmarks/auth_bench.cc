// What authentication (net/auth.h) costs per connection: one HMAC-SHA256; a TCPStore
// client's connect plus one request against an in-process server, without and with a
// token, and over mutual TLS (net/tls.h; certificates of a test CA made at start, or the
// files of TDIST_TLS_CERT/KEY/CA) without and with a token; and a two-rank tcp and shm
// Comm's whole setup (ranks as threads over a HashStore), without and with a token.
// Compare the /0 and /1 rows, and BM_StoreConnect with BM_StoreConnectTls, of one run.
//
//   auth_bench [--benchmark_min_time=...]
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <thread>

#include "net/auth.h"
#include "net/tls.h"
#include "support/test_certs.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"
#include "tdist/tcp_store.h"
#include "transport/comm.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist {
namespace {

const char* const kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

void BM_Hmac(benchmark::State& state) {
  const net::auth::Key key(kToken);
  const net::auth::Nonce a = net::auth::random_nonce(), b = net::auth::random_nonce();
  for (auto _ : state) benchmark::DoNotOptimize(net::auth::mac(key, "label", "context", a, b));
}
BENCHMARK(BM_Hmac);

void BM_StoreConnect(benchmark::State& state) {
  const std::string token = state.range(0) != 0 ? kToken : "";
  auto server = TCPStoreServer::start("127.0.0.1", 0, token, TlsFiles{});  // no TLS
  TCPStoreOptions options;
  options.port = server->port();
  options.auth_token = token;
  options.tls = TlsFiles{};
  for (auto _ : state) {
    TCPStore client("127.0.0.1", options);
    benchmark::DoNotOptimize(client.num_keys());
  }
}
BENCHMARK(BM_StoreConnect)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The files of TDIST_TLS_CERT/KEY/CA, else a test CA's (made once, removed at exit).
TlsFiles bench_tls_files() {
  const net::tls::Config set = net::tls::config_from_settings();
  if (set.enabled()) return {set.cert, set.key, set.ca};
  static testing::TestPki pki;
  static const net::tls::Config made = pki.config("bench");
  return {made.cert, made.key, made.ca};
}

// As BM_StoreConnect, over TLS: a handshake (ECDHE and a certificate check each way) per
// connection.
void BM_StoreConnectTls(benchmark::State& state) {
  const std::string token = state.range(0) != 0 ? kToken : "";
  const TlsFiles tls = bench_tls_files();
  auto server = TCPStoreServer::start("127.0.0.1", 0, token, tls);
  TCPStoreOptions options;
  options.port = server->port();
  options.auth_token = token;
  options.tls = tls;
  for (auto _ : state) {
    TCPStore client("127.0.0.1", options);
    benchmark::DoNotOptimize(client.num_keys());
  }
}
BENCHMARK(BM_StoreConnectTls)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// One two-rank Comm per iteration; the token comes from the environment, as in a job.
template <typename Connect>
void comm_setup(benchmark::State& state, Connect connect) {
  if (state.range(0) != 0) {
    ::setenv("TDIST_AUTH_TOKEN", kToken, 1);
  } else {
    ::unsetenv("TDIST_AUTH_TOKEN");
  }
  auto store = std::make_shared<HashStore>();
  int round = 0;
  for (auto _ : state) {
    auto scoped = std::make_shared<PrefixStore>("round" + std::to_string(round++), store);
    std::unique_ptr<transport::Comm> other;
    std::thread peer([&] { other = connect(scoped, 1); });
    std::unique_ptr<transport::Comm> mine = connect(scoped, 0);
    peer.join();
  }
  ::unsetenv("TDIST_AUTH_TOKEN");
}

void BM_TcpCommSetup(benchmark::State& state) {
  comm_setup(state, [](std::shared_ptr<Store> store, int rank) {
    return transport::connect_tcp_comm(std::move(store), rank, 2,
                                       transport::TcpCommOptions::from_settings());
  });
}
BENCHMARK(BM_TcpCommSetup)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_ShmCommSetup(benchmark::State& state) {
  comm_setup(state, [](std::shared_ptr<Store> store, int rank) {
    return transport::connect_shm_comm(std::move(store), rank, 2,
                                       transport::ShmCommOptions::from_settings());
  });
}
BENCHMARK(BM_ShmCommSetup)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tdist

BENCHMARK_MAIN();
