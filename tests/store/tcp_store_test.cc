// TCPStore server and client: ports, connection failures, protocol abuse, timeouts that
// leave the connection clean, many clients, descriptors, and the connection limit (the
// frame timeout and the buffer budget: tcp_store_budget_test.cc). The Store semantics
// themselves are checked by the conformance suite (conformance_tcp_test.cc).
#include "tdist/tcp_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/address.h"
#include "net/socket.h"
#include "store/tcp_store_protocol.h"
#include "support/error_of.h"
#include "support/sanitizers.h"
#include "tcp_store_test_util.h"
#include "tdist/error.h"

namespace tdist {
namespace {

using namespace std::chrono_literals;
using store_wire::FrameWriter;
using namespace store_test;

TEST(NetAddress, ParsesHostPortForms) {
  EXPECT_EQ(net::parse_host_port("node1:29500").host, "node1");
  EXPECT_EQ(net::parse_host_port("node1:29500").port, 29500);
  EXPECT_EQ(net::parse_host_port("[::1]:80").host, "::1");
  EXPECT_EQ(net::parse_host_port("[::1]:80").port, 80);
  EXPECT_EQ(net::parse_host_port(":7").host, "");
  EXPECT_THROW(net::parse_host_port("node1"), InvalidArgument);
  EXPECT_THROW(net::parse_host_port("::1:80"), InvalidArgument);
  EXPECT_THROW(net::parse_host_port("h:70000"), InvalidArgument);
  EXPECT_THROW(net::parse_host_port("[::1]80"), InvalidArgument);
  EXPECT_EQ(net::format_host_port("::1", 5), "[::1]:5");
  EXPECT_EQ(net::format_host_port("10.0.0.1", 5), "10.0.0.1:5");
}

TEST(TCPStoreServer, PortZeroPublishesTheRealPort) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  ASSERT_NE(server->port(), 0);
  auto client = connect(server->port());
  client->set("k", std::string_view("v"));
  EXPECT_EQ(get_text(*client, "k"), "v");
  EXPECT_EQ(client->port(), server->port());
}

TEST(TCPStoreServer, ServesIPv6AndDualStack) {
  std::unique_ptr<TCPStoreServer> server;
  try {
    server = TCPStoreServer::start("::", 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 here: " << e.what();
  }
  TCPStore v4("127.0.0.1", client_options(server->port()));
  v4.set("k", std::string_view("v"));
  try {
    TCPStore v6("::1", client_options(server->port()));
    EXPECT_EQ(get_text(v6, "k"), "v");
  } catch (const TimeoutError& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
}

TEST(TCPStoreServer, TakenPortNamesAddressAndPort) {
  auto first = TCPStoreServer::start("127.0.0.1", 0);
  const std::string port = std::to_string(first->port());
  std::string what = error_of<Error>([&] { TCPStoreServer::start("127.0.0.1", first->port()); });
  EXPECT_NE(what.find("127.0.0.1:" + port), std::string::npos) << what;
  EXPECT_NE(what.find("already in use"), std::string::npos) << what;
  TCPStoreOptions o = client_options(first->port());
  o.is_server = true;
  what = error_of<Error>([&] { TCPStore("127.0.0.1", o); });
  EXPECT_NE(what.find("already in use"), std::string::npos) << what;
}

TEST(TCPStore, ServerOnTheWildcardAddressIsReachable) {
  TCPStoreOptions o = client_options(0);
  o.is_server = true;
  TCPStore owner("0.0.0.0", o);
  EXPECT_EQ(owner.host(), "0.0.0.0");
  ASSERT_NE(owner.port(), 0);
  owner.set("k", std::string_view("v"));
  auto other = connect(owner.port());
  EXPECT_EQ(get_text(*other, "k"), "v");
}

TEST(TCPStore, ConnectTimeoutNamesHostAndPort) {
  const uint16_t port = unused_port();
  TCPStoreOptions o = client_options(port);
  o.connect_timeout = 500ms;
  const auto start = Clock::now();
  std::string what = error_of<TimeoutError>([&] { TCPStore("127.0.0.1", o); });
  const auto took = Clock::now() - start;
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << what;
  EXPECT_NE(what.find("refused"), std::string::npos) << what;
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 2500ms);
}

TEST(TCPStore, ServerGoneRaisesPeerError) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto idle = connect(server->port());
  auto blocked = connect(server->port());
  idle->set("k", std::string_view("v"));
  std::string blocked_error;
  std::thread waiter([&] {
    blocked_error = error_of<PeerError>([&] { blocked->get("never", Deadline::after(30s)); });
  });
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  server.reset();
  waiter.join();
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_NE(blocked_error.find("127.0.0.1:"), std::string::npos) << blocked_error;
  std::string what = error_of<PeerError>([&] { idle->set("k", std::string_view("w")); });
  EXPECT_NE(what.find("127.0.0.1:"), std::string::npos) << what;
  // Later calls keep failing the same way instead of hanging.
  EXPECT_THROW(idle->get("k", Deadline::after(1s)), PeerError);
}

// Each bad client is closed; a well-behaved client keeps its keys and carries on.
class TCPStoreAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TCPStoreServer::start("127.0.0.1", 0);
    good_ = connect(server_->port());
    good_->set("before", std::string_view("1"));
  }

  void expect_closed_and_unharmed(net::Fd bad) {
    EXPECT_TRUE(closed_by_peer(bad.get(), Deadline::after(kShort)));
    EXPECT_EQ(get_text(*good_, "before"), "1");
    good_->set("after", std::string_view("2"));
    EXPECT_EQ(get_text(*good_, "after"), "2");
    auto fresh = connect(server_->port());
    EXPECT_EQ(get_text(*fresh, "before"), "1");
    EXPECT_EQ(fresh->num_keys(), 2);
  }

  net::Fd raw() { return net::connect_tcp("127.0.0.1", server_->port(), Deadline::after(kShort)); }

  // Starts a fresh server with the setting `name` = `value` (read when it starts), and a
  // fresh good client.
  void restart_with(const char* name, const char* value) {
    ::setenv(name, value, 1);
    server_ = TCPStoreServer::start("127.0.0.1", 0);
    ::unsetenv(name);
    good_ = connect(server_->port());
  }

  void send_bytes(int fd, const std::vector<uint8_t>& bytes) {
    net::write_full(fd, bytes.data(), bytes.size(), Deadline::after(kShort), "server");
  }

  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStore> good_;
};

TEST_F(TCPStoreAbuse, GarbageBytes) {
  net::Fd bad = raw();
  const std::string garbage = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  send_bytes(bad.get(), std::vector<uint8_t>(garbage.begin(), garbage.end()));
  expect_closed_and_unharmed(std::move(bad));
}

TEST_F(TCPStoreAbuse, TruncatedFrameThenClose) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame;
  FrameWriter(frame, static_cast<uint8_t>(store_wire::Command::kSet), 1)
      .bytes(std::string_view("truncated"))
      .bytes(std::string_view("value"))
      .finish();
  frame.resize(frame.size() - 3);
  send_bytes(bad.get(), frame);
  ::shutdown(bad.get(), SHUT_WR);
  expect_closed_and_unharmed(std::move(bad));
  EXPECT_FALSE(good_->check({"truncated"}));
}

TEST_F(TCPStoreAbuse, MalformedPayload) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame;
  // A key whose size field points past the end of the frame.
  FrameWriter(frame, static_cast<uint8_t>(store_wire::Command::kSet), 1).u32(1000).finish();
  send_bytes(bad.get(), frame);
  expect_closed_and_unharmed(std::move(bad));
}

TEST_F(TCPStoreAbuse, UnknownCommand) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame;
  FrameWriter(frame, 200, 1).finish();
  send_bytes(bad.get(), frame);
  expect_closed_and_unharmed(std::move(bad));
}

TEST_F(TCPStoreAbuse, BadVersionGetsAnErrorReplyThenClose) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame;
  FrameWriter(frame, static_cast<uint8_t>(store_wire::Command::kPing), 7).finish();
  frame[4] = 99;  // the version byte
  send_bytes(bad.get(), frame);
  uint8_t header[store_wire::kHeaderBytes];
  net::read_full(bad.get(), header, sizeof(header), Deadline::after(kShort), "server");
  store_wire::FrameHeader h = store_wire::decode_header(header);
  EXPECT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kError));
  EXPECT_EQ(h.request_id, 7u);
  expect_closed_and_unharmed(std::move(bad));
}

TEST_F(TCPStoreAbuse, OversizedFrame) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame = {0xff, 0xff, 0xff, 0x7f, store_wire::kVersion, 1, 0, 0, 0, 0};
  send_bytes(bad.get(), frame);
  expect_closed_and_unharmed(std::move(bad));
}

// A connection that closes with many waits parked on one key leaves the server at once:
// each wait leaves its key's list in O(1) (it was O(N^2), 8 s at N = 160,000, during which
// the single server thread answered nobody).
TEST_F(TCPStoreAbuse, ClosingWithManyParkedWaitsIsCheap) {
  constexpr uint32_t kWaits = 200'000;
  restart_with("TDIST_STORE_MAX_WAITS_PER_CONNECTION", "1000000");
  net::Fd bad = raw();
  std::vector<uint8_t> frames;
  const std::vector<std::string> never = {"never"};
  for (uint32_t id = 1; id <= kWaits; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kWait), id).keys(never).finish();
  }
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kPing), kWaits + 1).finish();
  send_bytes(bad.get(), frames);
  uint8_t header[store_wire::kHeaderBytes];  // the PING's reply: every WAIT is parked
  net::read_full(bad.get(), header, sizeof(header), Deadline::after(kShort), "server");
  EXPECT_EQ(store_wire::decode_header(header).request_id, kWaits + 1);
  const auto start = Clock::now();
  bad.reset();
  good_->set("after", std::string_view("2"));
  EXPECT_EQ(get_text(*good_, "after"), "2");
  EXPECT_LT(Clock::now() - start, 5s);         // O(N^2) took minutes here; O(N) milliseconds
  good_->set("never", std::string_view("x"));  // wakes nobody: the waits are gone
  EXPECT_EQ(get_text(*good_, "never"), "x");
}

// A connection may park only so many waits; the one over the cap is refused with a reason,
// and the connection and every other client go on.
TEST_F(TCPStoreAbuse, ParkedWaitsPerConnectionAreCapped) {
  restart_with("TDIST_STORE_MAX_WAITS_PER_CONNECTION", "4");
  net::Fd bad = raw();
  std::vector<uint8_t> frames;
  for (uint32_t id = 1; id <= 5; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kWait), id)
        .keys({"missing" + std::to_string(id)})
        .finish();
  }
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kPing), 6).finish();
  send_bytes(bad.get(), frames);
  std::vector<uint8_t> payload;
  store_wire::FrameHeader h = read_reply(bad.get(), &payload);  // the 5th WAIT, refused
  EXPECT_EQ(h.request_id, 5u);
  EXPECT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kError));
  const std::string why(payload.begin() + 4, payload.end());
  EXPECT_NE(why.find("TDIST_STORE_MAX_WAITS_PER_CONNECTION=4"), std::string::npos) << why;
  EXPECT_EQ(read_reply(bad.get(), &payload).request_id, 6u);  // still served
  good_->set("missing1", std::string_view("1"));              // completes the first WAIT
  EXPECT_EQ(read_reply(bad.get(), &payload).request_id, 1u);
  EXPECT_EQ(get_text(*good_, "missing1"), "1");
}

// A MULTI_GET whose reply would exceed a frame is refused before the reply is built.
TEST(TCPStore, MultiGetReplyIsBoundedBeforeItIsBuilt) {
  ::setenv("TDIST_STORE_MAX_VALUE_BYTES", "1024", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto a = connect(server->port());
  ::unsetenv("TDIST_STORE_MAX_VALUE_BYTES");
  a->set("big", std::string(1024, 'b'));
  const std::vector<std::string> many(2000, "big");  // 2 MB of reply, over 1 MiB + 1 KiB
  std::string what = error_of<InvalidArgument>([&] { a->multi_get(many); });
  EXPECT_NE(what.find("would be"), std::string::npos) << what;
  EXPECT_NE(what.find("over the frame limit"), std::string::npos) << what;
  EXPECT_EQ(a->multi_get(std::vector<std::string>(10, "big")).size(), 10u);
}

// Under ASan, RSS also counts the freed blocks it keeps in quarantine (256 MiB), under
// TSan the shadow of every byte written, so it says nothing about the replies a server holds.
constexpr bool kRssCountsLiveMemory =
    !test_support::kAddressSanitizer && !test_support::kThreadSanitizer;

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// Pipelined GETs whose replies the client does not read stop being answered at the pause
// threshold (64 MiB), instead of building every reply; they are all answered once the
// client reads.
TEST_F(TCPStoreAbuse, PipelinedGetsHonourTheReadPause) {
  constexpr uint32_t kGets = 200;  // 200 MiB of replies
  good_->set("mib", std::string(1 << 20, 'm'));
  net::Fd bad = raw();
  std::vector<uint8_t> frames;
  for (uint32_t id = 1; id <= kGets; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kGet), id)
        .bytes(std::string_view("mib"))
        .finish();
  }
  const long before = rss_kib();
  send_bytes(bad.get(), frames);
  std::this_thread::sleep_for(200ms);          // the server reads the whole burst at once
  EXPECT_EQ(get_text(*good_, "before"), "1");  // and serves others meanwhile
  const long grown_mib = (rss_kib() - before) / 1024;
  if (kRssCountsLiveMemory) {
    EXPECT_LT(grown_mib, 140) << "the server built " << grown_mib << " MiB of replies";
  }
  std::vector<uint8_t> payload;
  for (uint32_t id = 1; id <= kGets; ++id) {
    ASSERT_EQ(read_reply(bad.get(), &payload).request_id, id);
    ASSERT_EQ(payload.size(), 4u + (1u << 20));
  }
}

TEST_F(TCPStoreAbuse, KeyOverTheLimit) {
  net::Fd bad = raw();
  std::vector<uint8_t> frame;
  FrameWriter(frame, static_cast<uint8_t>(store_wire::Command::kSet), 1)
      .bytes(std::string(store_wire::Limits::from_settings().max_key_bytes + 1, 'k'))
      .bytes(std::string_view("v"))
      .finish();
  send_bytes(bad.get(), frame);
  expect_closed_and_unharmed(std::move(bad));
  EXPECT_THROW(good_->set(std::string(100'000, 'k'), std::string_view("v")), InvalidArgument);
}

TEST(TCPStore, TimedOutGetLeavesTheConnectionClean) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto a = connect(server->port());
  auto b = connect(server->port());
  for (int round = 0; round < 20; ++round) {
    const std::string key = "late" + std::to_string(round);
    const auto start = Clock::now();
    std::string what = error_of<TimeoutError>(
        [&] { a->get(key, Deadline::after(std::chrono::milliseconds(20))); });
    EXPECT_NE(what.find("'" + key + "'"), std::string::npos) << what;
    EXPECT_LT(Clock::now() - start, 2s);
    // The key arrives right after the timeout; the cancelled get must not answer later.
    b->set(key, std::string_view("late value"));
    a->set("fresh" + std::to_string(round), std::string_view("fresh value"));
    EXPECT_EQ(get_text(*a, "fresh" + std::to_string(round)), "fresh value");
    EXPECT_EQ(a->add("counter", 1), round + 1);
    EXPECT_EQ(get_text(*a, key), "late value");
  }
  std::string what = error_of<TimeoutError>([&] {
    a->wait({"late0", "missing1", "missing2"}, Deadline::after(50ms));
  });
  EXPECT_NE(what.find("'missing1', 'missing2'"), std::string::npos) << what;
  EXPECT_EQ(what.find("late0"), std::string::npos) << what;
  EXPECT_EQ(a->multi_get({"late0", "late1"}).size(), 2u);
}

TEST(TCPStore, SixtyFourClientsAddingConcurrently) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  constexpr int kThreads = 64;
  constexpr int kAdds = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto client = connect(server->port());
        for (int i = 0; i < kAdds; ++i) client->add("sum", t + 1);
        client->add("done", 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  auto client = connect(server->port());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client->add("sum", 0), kAdds * kThreads * (kThreads + 1) / 2);
  EXPECT_EQ(client->add("done", 0), kThreads);
}

TEST(TCPStore, WaitsAreReleasedBySetsFromAnotherClient) {
  TCPStoreOptions o = client_options(0);
  o.is_server = true;
  TCPStore owner("127.0.0.1", o);
  auto waiter_client = connect(owner.port());
  std::atomic<bool> released{false};
  std::thread waiter([&] {
    waiter_client->wait({"x", "y"}, Deadline::after(kShort));
    released = true;
  });
  std::this_thread::sleep_for(50ms);
  owner.set("x", std::string_view("1"));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(released.load());
  owner.set("y", std::string_view("2"));
  waiter.join();
  EXPECT_TRUE(released.load());
}

TEST(TCPStore, WaitForWorkersHoldsEveryoneUntilAllJoined) {
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  std::atomic<int> returned{0};
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (int i = 0; i < 3; ++i) {
    workers.emplace_back([&, i] {
      std::this_thread::sleep_for(i * 100ms);  // the last one joins at ~200 ms
      TCPStoreOptions w = client_options(server->port());
      w.num_workers = 3;
      w.wait_for_workers = true;
      TCPStore worker("127.0.0.1", w);
      EXPECT_GE(Clock::now() - start, 190ms);
      EXPECT_EQ(worker.add("/tdist/workers", 0), 3);
      ++returned;
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(returned.load(), 3);
}

// APPEND cannot grow a value past the value limit: the client that tries gets a clear
// error, the value stays as it was, and other clients go on.
TEST(TCPStore, AppendStaysWithinTheValueLimit) {
  ::setenv("TDIST_STORE_MAX_VALUE_BYTES", "64", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto a = connect(server->port());
  auto b = connect(server->port());
  ::unsetenv("TDIST_STORE_MAX_VALUE_BYTES");
  a->append("log", to_bytes(std::string(40, 'x')));
  std::string what =
      error_of<InvalidArgument>([&] { a->append("log", to_bytes(std::string(40, 'y'))); });
  EXPECT_NE(what.find("80 bytes, over TDIST_STORE_MAX_VALUE_BYTES=64"), std::string::npos) << what;
  EXPECT_EQ(get_text(*a, "log"), std::string(40, 'x'));
  a->append("log", to_bytes(std::string(24, 'z')));  // exactly at the limit
  EXPECT_EQ(get_text(*b, "log"), std::string(40, 'x') + std::string(24, 'z'));
  b->set("other", std::string_view("fine"));
  EXPECT_EQ(get_text(*a, "other"), "fine");
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// Out of file descriptors (the server's process allows 64 here), a TCPStore server makes
// room for new clients by closing, oldest first, connections that have not proved
// themselves: with a token, those that have not authenticated; without, those that never
// sent a request. A flood of such connections cannot lock the job's own clients out: one
// that connects during the flood is served, and so are those from before. When every
// connection has proved itself, the newest client is dropped instead (it sees its
// connection close rather than hang). Either way the server does not spin on its
// listener. (It used to re-open its spare descriptor while the dropped one was still
// open, lose the spare, and then busy-loop at 100% CPU writing the same warning.)
// The bodies run in child processes; each returns its exit code, 0 on success.
enum class Flood { kIdle, kServed };

TCPStoreOptions options_with(uint16_t port, const std::string& token) {
  TCPStoreOptions o = client_options(port);
  o.auth_token = token;
  return o;
}

// 200 connections that never send a byte; then a client of the job connects.
int idle_flood(uint16_t port, const std::string& token) {
  std::vector<net::Fd> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(net::connect_tcp("127.0.0.1", port, Deadline::after(kShort)));
  }
  // The oldest made room for newer ones.
  if (!closed_by_peer(clients.front().get(), Deadline::after(kShort))) return 12;
  try {
    TCPStore late("127.0.0.1", options_with(port, token));
    late.set("late", std::string_view("served"));
    if (get_text(late, "late") != "served") return 14;
  } catch (const std::exception&) {
    return 15;
  }
  std::this_thread::sleep_for(1s);  // keep the server out of descriptors a while
  return 0;
}

// Connections that each send a request and read its reply, until one is dropped.
int served_flood(uint16_t port) {
  std::vector<uint8_t> ping;
  FrameWriter(ping, static_cast<uint8_t>(store_wire::Command::kPing), 1).finish();
  std::vector<net::Fd> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(net::connect_tcp("127.0.0.1", port, Deadline::after(kShort)));
    const int fd = clients.back().get();
    try {
      net::write_full(fd, ping.data(), ping.size(), Deadline::after(kShort), "server");
      std::vector<uint8_t> payload;
      if (read_reply(fd, &payload).request_id == 1) continue;  // served
    } catch (const std::exception&) {                          // closed unserved
    }
    if (!closed_by_peer(fd, Deadline::after(kShort))) return 12;
    std::this_thread::sleep_for(1s);
    return 0;
  }
  return 13;  // the server never ran out
}

int out_of_descriptors_run(const std::string& token, Flood kind) {
  int ports[2];
  if (::pipe(ports) != 0) return 10;
  const pid_t flood = ::fork();
  if (flood == 0) {  // the flood, from a process with its own limit
    uint16_t port = 0;
    if (::read(ports[0], &port, sizeof(port)) != sizeof(port)) std::_Exit(11);
    std::_Exit(kind == Flood::kIdle ? idle_flood(port, token) : served_flood(port));
  }
  const rlimit tight{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &tight) != 0) return 13;
  auto server = TCPStoreServer::start("127.0.0.1", 0, token);
  TCPStore good("127.0.0.1", options_with(server->port(), token));
  good.set("k", std::string_view("v"));
  const uint16_t port = server->port();
  if (::write(ports[1], &port, sizeof(port)) != sizeof(port)) return 14;
  const double cpu_before = cpu_seconds();
  const auto wall_before = Clock::now();
  int status = 0;
  ::waitpid(flood, &status, 0);
  const double cpu = cpu_seconds() - cpu_before;
  const double wall = std::chrono::duration<double>(Clock::now() - wall_before).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 20 + WEXITSTATUS(status);
  if (cpu > 0.5 * wall) return 40;  // a spinning loop uses a whole core
  if (get_text(good, "k") != "v") return 41;
  if (kind == Flood::kIdle && get_text(good, "late") != "served") return 42;
  return 0;
}

TEST(TCPStore, OutOfDescriptorsAnIdleFloodMakesRoomForTheJobsClients) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(out_of_descriptors_run("", Flood::kIdle)), ::testing::ExitedWithCode(0),
              "");
}

TEST(TCPStore, OutOfDescriptorsUnauthenticatedFloodMakesRoomForTheJobsClients) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(out_of_descriptors_run("job-secret", Flood::kIdle)),
              ::testing::ExitedWithCode(0), "");
}

TEST(TCPStore, OutOfDescriptorsWithEveryClientServedDropsNewOnesWithoutSpinning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(out_of_descriptors_run("", Flood::kServed)), ::testing::ExitedWithCode(0),
              "");
}

// A client does not trust the reply size a server announces: over its frame limit, the
// connection fails with a PeerError saying so, and nothing is reserved for it.
TEST(TCPStore, ClientRefusesAnAnnouncedReplyOverTheFrameLimit) {
  net::Listener fake = net::listen_tcp("127.0.0.1", 0);
  std::thread server([&] {
    if (!net::wait_fd(fake.fd.get(), POLLIN, Deadline::after(kShort))) return;
    int error = 0;
    net::Fd c = net::accept_tcp(fake.fd.get(), &error);
    if (!c || !net::wait_fd(c.get(), POLLIN, Deadline::after(kShort))) return;
    std::vector<uint8_t> request(64);
    (void)::recv(c.get(), request.data(), request.size(), 0);  // the client's first request
    const std::vector<uint8_t> header = {0xf0, 0xff, 0xff, 0xff, store_wire::kVersion,
                                         0,    1,    0,    0,    0};
    net::write_full(c.get(), header.data(), header.size(), Deadline::after(kShort), "client");
    std::this_thread::sleep_for(500ms);
  });
  std::string what =
      error_of<PeerError>([&] { connect(fake.port())->get("k", Deadline::after(kShort)); });
  server.join();
  EXPECT_NE(what.find("announced a reply of 4294967280 bytes"), std::string::npos) << what;
}

TEST(TCPStore, MaxConnectionsIsRespected) {
  ::setenv("TDIST_STORE_MAX_CONNECTIONS", "2", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  ::unsetenv("TDIST_STORE_MAX_CONNECTIONS");
  auto first = connect(server->port());
  auto second = connect(server->port());
  first->set("k", std::string_view("v"));
  auto third = connect(server->port());  // accepted, told why, then closed
  std::string what = error_of<PeerError>([&] { third->get("k", Deadline::after(kShort)); });
  EXPECT_NE(what.find("refused this connection: 2 clients are connected, the most "
                      "TDIST_STORE_MAX_CONNECTIONS=2 allows"),
            std::string::npos)
      << what;
  EXPECT_EQ(get_text(*second, "k"), "v");
  first.reset();  // frees a slot once the server sees the close
  const Deadline deadline = Deadline::after(kShort);
  bool joined = false;
  while (!joined && !deadline.expired()) {
    try {
      auto fourth = connect(server->port());
      joined = get_text(*fourth, "k") == "v";
    } catch (const PeerError&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_TRUE(joined);
}

}  // namespace
}  // namespace tdist
