// Store conformance suite: the gtest cases every Store implementation must pass, written
// once against the Store interface (store.h states the semantics they check).
//
// A store joins the suite with a StoreFactory, in its own conformance_<name>_test.cc:
//
//   INSTANTIATE_TEST_SUITE_P(Stores, StoreConformance,
//                            ::testing::Values(StoreFactory{"Hash", make_hash, nullptr}),
//                            StoreFactoryName());
//
// Each test calls create() once (in SetUp), and connect() any number of times: from the
// test's main thread, from worker threads, and in fork()ed children. Children are forked
// from the main thread while no other thread of that test runs (the store's own threads,
// e.g. a server's, may be running in the parent); a child calls only connect() and the
// store it returns, and ends with _exit. Stores are released before cleanup() runs.
//
// Every case finishes in a few seconds; blocking calls in the tests carry deadlines, and
// forked children are killed by SIGALRM should they hang.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/store.h"

namespace tdist_test {

struct StoreFactory {
  // Names the instantiation in test names ("Hash", "File", "PrefixOverFile", ...).
  std::string name;
  // A fresh, empty store: the first client.
  std::function<std::shared_ptr<tdist::Store>()> create;
  // Another client of the store create() made last, usable in this process and in a forked
  // child. Null for a store that lives in one process only: then the multi-client cases
  // share the created store and the multi-process cases skip.
  std::function<std::shared_ptr<tdist::Store>()> connect;
  // Optional: removes what create() left behind (a temporary file, ...). Runs after
  // every test, once the stores it made are released.
  std::function<void()> cleanup;
  // Adds per thread of ConcurrentAddsAreExact (8 threads on one key): fewer for a store
  // whose every write goes through consensus (etcd), where 1000 take ~25 s.
  int concurrent_adds = 1000;
};

// Prints a factory as its name (gtest and CTest show it; the default would be raw bytes).
inline void PrintTo(const StoreFactory& factory, std::ostream* out) { *out << factory.name; }

// Names each instantiation after its factory.
struct StoreFactoryName {
  std::string operator()(const ::testing::TestParamInfo<StoreFactory>& info) const {
    return info.param.name;
  }
};

class StoreConformance : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The store create() made for this test.
  tdist::Store& store() { return *store_; }
  // A new client when the factory has connect(), else the created store.
  std::shared_ptr<tdist::Store> client();
  bool can_fork() const { return static_cast<bool>(GetParam().connect); }

  std::shared_ptr<tdist::Store> store_;
};

// The cases with clients in forked processes: instantiated only for stores whose
// factory has connect().
class StoreCrossProcess : public StoreConformance {};

// --- helpers shared by the store tests ---------------------------------------------------

// Generous bound for a wait that another thread or process releases soon.
inline constexpr std::chrono::milliseconds kReleaseWait{10'000};
// How late a timed-out call may return (the machines are small and busy).
inline constexpr std::chrono::milliseconds kLateSlack{1'500};

// Runs body() in a fork()ed child that _exits with body's return value (99 when it throws).
// An alarm kills the child after 30 s should it hang. Call from the test's main thread.
pid_t fork_child(const std::function<int()>& body);

// Waits for `pids` until the deadline and SIGKILLs those still running. Returns "" when
// every child exited with 0, else a line per failed child saying how it ended.
std::string wait_children(const std::vector<pid_t>& pids, tdist::Deadline deadline);

// A new, empty file under /tmp (mkstemp) to hold a FileStore; the caller removes it.
std::string temp_store_path();

}  // namespace tdist_test
