// Store conformance suite, part 1: the fixture, the shared helpers, and the single-client
// semantics of every call (set/get, add, compare_set, check, wait, delete_key, num_keys,
// append, multi_get/multi_set, timeouts). Multi-client cases are in conformance_multi.cc.
#include "store/conformance.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tdist/error.h"

namespace tdist_test {

using std::chrono::milliseconds;
using tdist::Bytes;
using tdist::Clock;
using tdist::Deadline;
using tdist::to_bytes;

void StoreConformance::SetUp() {
  store_ = GetParam().create();
  ASSERT_NE(store_, nullptr);
}

void StoreConformance::TearDown() {
  store_.reset();
  if (GetParam().cleanup) GetParam().cleanup();
}

std::shared_ptr<tdist::Store> StoreConformance::client() {
  return GetParam().connect ? GetParam().connect() : store_;
}

pid_t fork_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // parent (or -1)
  ::alarm(30);
  int code = 99;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
  } catch (...) {
    std::fprintf(stderr, "child %d: unknown exception\n", static_cast<int>(::getpid()));
  }
  std::fflush(stderr);
  ::_exit(code);
}

std::string wait_children(const std::vector<pid_t>& pids, Deadline deadline) {
  std::string failures;
  for (pid_t pid : pids) {
    if (pid < 0) {
      failures += "fork failed\n";
      continue;
    }
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && !deadline.expired()) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      failures += "child " + std::to_string(pid) + " still running at the deadline\n";
    } else if (done < 0) {
      failures += "waitpid " + std::to_string(pid) + " failed\n";
    } else if (WIFSIGNALED(status)) {
      failures += "child " + std::to_string(pid) + " killed by signal " +
                  std::to_string(WTERMSIG(status)) + "\n";
    } else if (WEXITSTATUS(status) != 0) {
      failures += "child " + std::to_string(pid) + " exited with " +
                  std::to_string(WEXITSTATUS(status)) + "\n";
    }
  }
  return failures;
}

std::string temp_store_path() {
  char name[] = "/tmp/tdist_store_XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  return name;
}

namespace {

Deadline release_deadline() { return Deadline::after(kReleaseWait); }

// Calls fn, which must throw TimeoutError at `timeout`: not early, not much late, and with
// a message naming `key`.
template <typename Fn>
void expect_timeout(milliseconds timeout, const std::string& key, Fn fn) {
  const auto start = Clock::now();
  try {
    fn(Deadline::after(timeout));
    ADD_FAILURE() << "no TimeoutError";
  } catch (const tdist::TimeoutError& e) {
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, timeout);
    EXPECT_LT(waited, timeout + kLateSlack);
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST_P(StoreConformance, SetGetRoundTrip) {
  store().set("key", std::string_view("value"));
  EXPECT_EQ(store().get("key", release_deadline()), to_bytes("value"));

  store().set("empty", Bytes{});
  EXPECT_EQ(store().get("empty", release_deadline()), Bytes{});

  const Bytes binary = {0, 1, 0, 255, 0, '\n', 0x80, 0};
  store().set("binary", binary);
  EXPECT_EQ(store().get("binary", release_deadline()), binary);

  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + (i >> 11));
  store().set("big", big);
  EXPECT_EQ(store().get("big", release_deadline()), big);

  const std::string odd_key = std::string("odd key/with\0nul", 16) + "\xff";
  store().set(odd_key, std::string_view("odd"));
  EXPECT_EQ(store().get(odd_key, release_deadline()), to_bytes("odd"));

  // A second client sees what the first wrote.
  EXPECT_EQ(client()->get("big", release_deadline()), big);
}

TEST_P(StoreConformance, SetOverwrites) {
  store().set("key", std::string_view("first"));
  store().set("key", std::string_view("second, longer"));
  EXPECT_EQ(store().get("key", release_deadline()), to_bytes("second, longer"));
  store().set("key", std::string_view("3"));
  EXPECT_EQ(client()->get("key", release_deadline()), to_bytes("3"));
}

TEST_P(StoreConformance, GetBlocksUntilSet) {
  auto setter = client();
  const auto start = Clock::now();
  std::thread thread([&] {
    std::this_thread::sleep_for(milliseconds(100));
    setter->set("late", std::string_view("here"));
  });
  EXPECT_EQ(store().get("late", release_deadline()), to_bytes("here"));
  EXPECT_GE(Clock::now() - start, milliseconds(90));
  thread.join();
}

TEST_P(StoreConformance, GetWithoutDeadlineWaitsForever) {
  auto setter = client();
  std::thread thread([&] {
    std::this_thread::sleep_for(milliseconds(50));
    setter->set("late", std::string_view("here"));
  });
  EXPECT_EQ(store().get("late", Deadline::never()), to_bytes("here"));
  thread.join();
}

TEST_P(StoreConformance, GetTimesOut) {
  expect_timeout(milliseconds(200), "missing_key",
                 [&](Deadline d) { store().get("missing_key", d); });
}

TEST_P(StoreConformance, GetUsesStoreTimeout) {
  store().set_timeout(milliseconds(150));
  EXPECT_EQ(store().timeout(), milliseconds(150));
  expect_timeout(milliseconds(150), "missing_key", [&](Deadline) { store().get("missing_key"); });
}

TEST_P(StoreConformance, Add) {
  EXPECT_EQ(store().add("counter", 5), 5);  // missing counts as 0
  EXPECT_EQ(store().add("counter", 0), 5);
  EXPECT_EQ(store().add("counter", -12), -7);
  EXPECT_EQ(store().get("counter", release_deadline()), to_bytes("-7"));
  EXPECT_EQ(client()->add("counter", 1'000'000'000'000), 999'999'999'993);
  EXPECT_EQ(store().get("counter", release_deadline()), to_bytes("999999999993"));

  store().set("preset", std::string_view("41"));
  EXPECT_EQ(store().add("preset", 1), 42);
}

TEST_P(StoreConformance, CompareSet) {
  const Bytes empty;
  // Missing key, empty expected: sets and returns desired.
  EXPECT_EQ(store().compare_set("a", empty, to_bytes("one")), to_bytes("one"));
  EXPECT_EQ(store().get("a", release_deadline()), to_bytes("one"));
  // Missing key, non-empty expected: returns expected, sets nothing.
  EXPECT_EQ(store().compare_set("b", to_bytes("x"), to_bytes("y")), to_bytes("x"));
  EXPECT_FALSE(store().check({"b"}));
  // Present, matching: sets and returns desired.
  EXPECT_EQ(store().compare_set("a", to_bytes("one"), to_bytes("two")), to_bytes("two"));
  EXPECT_EQ(store().get("a", release_deadline()), to_bytes("two"));
  // Present, not matching: returns the current value, changes nothing.
  EXPECT_EQ(store().compare_set("a", to_bytes("one"), to_bytes("three")), to_bytes("two"));
  EXPECT_EQ(store().get("a", release_deadline()), to_bytes("two"));
  // Present with an empty value, expected empty: matches.
  store().set("e", Bytes{});
  EXPECT_EQ(store().compare_set("e", empty, to_bytes("filled")), to_bytes("filled"));
}

TEST_P(StoreConformance, Check) {
  EXPECT_TRUE(store().check({}));
  EXPECT_FALSE(store().check({"a"}));
  store().set("a", std::string_view("1"));
  EXPECT_TRUE(store().check({"a"}));
  EXPECT_FALSE(store().check({"a", "b"}));
  client()->set("b", std::string_view("2"));
  EXPECT_TRUE(store().check({"a", "b"}));
}

TEST_P(StoreConformance, WaitForSeveralKeys) {
  auto setter = client();
  const auto start = Clock::now();
  std::thread thread([&] {
    for (const char* key : {"w1", "w2", "w3"}) {
      std::this_thread::sleep_for(milliseconds(40));
      setter->set(key, std::string_view("x"));
    }
  });
  store().wait({"w1", "w2", "w3"}, release_deadline());
  EXPECT_GE(Clock::now() - start, milliseconds(110));
  EXPECT_TRUE(store().check({"w1", "w2", "w3"}));
  thread.join();
  store().wait({});  // nothing to wait for
}

TEST_P(StoreConformance, WaitTimesOut) {
  store().set("present", std::string_view("1"));
  expect_timeout(milliseconds(200), "absent_key", [&](Deadline d) {
    store().wait({"present", "absent_key"}, d);
  });
}

TEST_P(StoreConformance, DeleteKey) {
  store().set("doomed", std::string_view("1"));
  EXPECT_TRUE(store().delete_key("doomed"));
  EXPECT_FALSE(store().delete_key("doomed"));
  EXPECT_FALSE(store().delete_key("never_set"));
  EXPECT_FALSE(store().check({"doomed"}));
  EXPECT_FALSE(client()->check({"doomed"}));
  expect_timeout(milliseconds(100), "doomed", [&](Deadline d) { store().get("doomed", d); });
  store().set("doomed", std::string_view("again"));
  EXPECT_EQ(store().get("doomed", release_deadline()), to_bytes("again"));
}

TEST_P(StoreConformance, NumKeys) {
  // Some stores keep internal keys, so count from where a fresh store starts.
  const int64_t base = store().num_keys();
  EXPECT_GE(base, 0);
  store().set("k1", std::string_view("1"));
  store().set("k2", std::string_view("2"));
  store().add("k3", 1);
  EXPECT_EQ(store().num_keys(), base + 3);
  store().set("k1", std::string_view("overwritten"));
  EXPECT_EQ(store().num_keys(), base + 3);
  store().delete_key("k2");
  EXPECT_EQ(store().num_keys(), base + 2);
  EXPECT_EQ(client()->num_keys(), base + 2);
}

TEST_P(StoreConformance, Append) {
  store().append("log", to_bytes("abc"));
  EXPECT_EQ(store().get("log", release_deadline()), to_bytes("abc"));
  store().append("log", Bytes{0, 'd'});
  client()->append("log", Bytes{});
  client()->append("log", to_bytes("ef"));
  EXPECT_EQ(store().get("log", release_deadline()), (Bytes{'a', 'b', 'c', 0, 'd', 'e', 'f'}));
  store().set("log", std::string_view("reset"));
  store().append("log", to_bytes("!"));
  EXPECT_EQ(store().get("log", release_deadline()), to_bytes("reset!"));
}

TEST_P(StoreConformance, MultiSetMultiGet) {
  store().multi_set({"m1", "m2", "m3"}, {to_bytes("one"), Bytes{}, Bytes{0, 1, 2}});
  EXPECT_EQ(store().multi_get({"m3", "m1", "m2"}, release_deadline()),
            (std::vector<Bytes>{Bytes{0, 1, 2}, to_bytes("one"), Bytes{}}));
  EXPECT_EQ(client()->get("m1", release_deadline()), to_bytes("one"));
  EXPECT_TRUE(store().multi_get({}, release_deadline()).empty());
  store().multi_set({}, {});

  EXPECT_THROW(store().multi_set({"x", "y"}, {to_bytes("1")}), tdist::InvalidArgument);
  EXPECT_FALSE(store().check({"x"}));
  EXPECT_FALSE(store().check({"y"}));
}

TEST_P(StoreConformance, MultiGetBlocksAndTimesOut) {
  store().set("g1", std::string_view("1"));
  auto setter = client();
  std::thread thread([&] {
    std::this_thread::sleep_for(milliseconds(60));
    setter->set("g2", std::string_view("2"));
  });
  EXPECT_EQ(store().multi_get({"g1", "g2"}, release_deadline()),
            (std::vector<Bytes>{to_bytes("1"), to_bytes("2")}));
  thread.join();
  expect_timeout(milliseconds(150), "g_missing", [&](Deadline d) {
    store().multi_get({"g1", "g_missing"}, d);
  });
}

}  // namespace
}  // namespace tdist_test
