// EtcdStore against a real etcd (tests/support/etcd_server.h; the binary fails, not skips,
// when etcd is not installed): the Store conformance suite, directly and through a
// PrefixStore, each test under a fresh key prefix; then what only etcd has: prefixes that
// keep jobs apart, a lost etcd raising PeerError naming host:port, a value over etcd's
// request limit, and round-trip times against TCPStore (printed for docs and reports).
#include "tdist/etcd_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "store/conformance.h"
#include "support/etcd_server.h"
#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "tdist/tcp_store.h"

namespace tdist_test {
namespace {

using std::chrono::milliseconds;
using tdist::Deadline;
using tdist::EtcdStore;
using tdist::Store;
using tdist::to_bytes;
using tdist::test_support::EtcdServer;

// One etcd for the whole binary, started by the first test that needs it (from the main
// thread) and killed at exit. A start that throws fails that test, and the next one tries again.
EtcdServer& shared_etcd() {
  static EtcdServer server;
  static const bool started = (server.start(), true);
  static_cast<void>(started);
  return server;
}

StoreFactory etcd_factory(std::string name,
                          std::function<std::shared_ptr<Store>(std::shared_ptr<Store>)> wrap) {
  auto prefix = std::make_shared<std::string>();
  auto connect = [prefix, wrap] {
    EtcdServer& etcd = shared_etcd();
    return wrap(std::make_shared<EtcdStore>(etcd.host(), etcd.port(), *prefix));
  };
  auto create = [prefix, name, connect] {
    static std::atomic<int> next{0};  // gtest copies factories: one count for all
    *prefix = "/test/" + name + "/" + std::to_string(next++) + "/";
    return connect();
  };
  return {std::move(name), create, connect, nullptr, /*concurrent_adds=*/100};
}

std::vector<StoreFactory> etcd_factories() {
  return {etcd_factory("Etcd", [](std::shared_ptr<Store> s) { return s; }),
          etcd_factory("PrefixOverEtcd", [](std::shared_ptr<Store> s) {
            return std::make_shared<tdist::PrefixStore>("job", std::move(s));
          })};
}

INSTANTIATE_TEST_SUITE_P(Etcd, StoreConformance, ::testing::ValuesIn(etcd_factories()),
                         StoreFactoryName());
INSTANTIATE_TEST_SUITE_P(Etcd, StoreCrossProcess, ::testing::ValuesIn(etcd_factories()),
                         StoreFactoryName());

TEST(EtcdStore, PrefixesKeepJobsApart) {
  EtcdServer& etcd = shared_etcd();
  EtcdStore a(etcd.host(), etcd.port(), "/apart/a/");
  EtcdStore b(etcd.host(), etcd.port(), "/apart/b/");
  EtcdStore a2(etcd.host(), etcd.port(), "/apart/a2/");  // "a" is a prefix of "a2/"'s text
  a.set("k", std::string_view("from a"));
  a.add("n", 1);
  b.set("k", std::string_view("from b"));
  a2.set("x", std::string_view("1"));
  EXPECT_EQ(a.num_keys(), 2);
  EXPECT_EQ(b.num_keys(), 1);
  EXPECT_EQ(tdist::to_string(a.get("k")), "from a");
  EXPECT_EQ(tdist::to_string(b.get("k")), "from b");
  EXPECT_FALSE(b.check({"n"}));
  EXPECT_EQ(a.prefix(), "/apart/a/");
}

TEST(EtcdStore, LostEtcdRaisesPeerErrorNamingIt) {
  EtcdServer etcd;
  etcd.start();
  EtcdStore store(etcd.host(), etcd.port(), "/lost/", milliseconds(5000), milliseconds(300));
  store.set("k", std::string_view("v"));
  const std::string where = etcd.endpoint();
  etcd.stop();
  try {
    store.set("k", std::string_view("w"));
    ADD_FAILURE() << "no PeerError";
  } catch (const tdist::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
  // A blocking call fails the same way, well before its deadline.
  const auto start = tdist::Clock::now();
  EXPECT_THROW(store.get("missing", Deadline::after(std::chrono::seconds(20))), tdist::PeerError);
  EXPECT_LT(tdist::Clock::now() - start, std::chrono::seconds(5));
}

TEST(EtcdStore, WatchBreaksWithPeerErrorWhenEtcdDies) {
  EtcdServer etcd;
  etcd.start();
  EtcdStore store(etcd.host(), etcd.port(), "/dies/", milliseconds(5000), milliseconds(300));
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(200));
    etcd.stop();
  });
  EXPECT_THROW(store.get("never", Deadline::after(std::chrono::seconds(20))), tdist::PeerError);
  killer.join();
}

TEST(EtcdStore, GetTimesOutNamingTheKey) {
  EtcdServer& etcd = shared_etcd();
  EtcdStore store(etcd.host(), etcd.port(), "/timeout/");
  const auto start = tdist::Clock::now();
  try {
    store.get("absent_key", Deadline::after(milliseconds(300)));
    ADD_FAILURE() << "no TimeoutError";
  } catch (const tdist::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent_key"), std::string::npos) << e.what();
  }
  EXPECT_GE(tdist::Clock::now() - start, milliseconds(300));
}

TEST(EtcdStore, ValueOverEtcdLimitIsInvalidArgument) {
  EtcdServer& etcd = shared_etcd();
  EtcdStore store(etcd.host(), etcd.port(), "/big/");
  EXPECT_THROW(store.set("huge", tdist::Bytes(3 << 20, 'x')), tdist::InvalidArgument);
  store.set("after", std::string_view("still serving"));
  EXPECT_EQ(tdist::to_string(store.get("after")), "still serving");
}

TEST(EtcdStore, UnreachableAtConstructionIsLazyThenPeerError) {
  const uint16_t port = tdist::net::listen_tcp("127.0.0.1", 0).port();  // released: closed
  EtcdStore store("127.0.0.1", port, "/x/", milliseconds(1000), milliseconds(200));
  EXPECT_THROW(store.num_keys(), tdist::PeerError);
}

// Mean microseconds of one set, one get and one add (each a round trip) over `n` of each.
struct RoundTrips {
  double set_us = 0, get_us = 0, add_us = 0;
};
RoundTrips round_trips(Store& store, int n) {
  auto mean_us = [n](const std::function<void()>& op) {
    const auto start = tdist::Clock::now();
    for (int i = 0; i < n; ++i) op();
    return std::chrono::duration<double, std::micro>(tdist::Clock::now() - start).count() / n;
  };
  RoundTrips r;
  r.set_us = mean_us([&] { store.set("rt", std::string_view("value")); });
  r.get_us = mean_us([&] { store.get("rt"); });
  r.add_us = mean_us([&] { store.add("rt_counter", 1); });
  return r;
}

TEST(EtcdStore, RoundTripTimesAgainstTcpStore) {
  constexpr int kOps = 300;
  EtcdServer& etcd = shared_etcd();
  EtcdStore on_etcd(etcd.host(), etcd.port(), "/rtt/");
  tdist::TCPStoreOptions o;
  o.is_server = true;
  tdist::TCPStore on_tcp("127.0.0.1", o);
  round_trips(on_etcd, 10);  // warm up: connections
  const RoundTrips e = round_trips(on_etcd, kOps);
  const RoundTrips t = round_trips(on_tcp, kOps);
  std::printf(
      "store round trips (mean of %d each, us): set/get/add EtcdStore %.0f/%.0f/%.0f, "
      "TCPStore %.0f/%.0f/%.0f\n",
      kOps, e.set_us, e.get_us, e.add_us, t.set_us, t.get_us, t.add_us);
  EXPECT_GT(e.set_us, 0.0);
}

}  // namespace
}  // namespace tdist_test
