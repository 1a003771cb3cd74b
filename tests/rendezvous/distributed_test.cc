// init_process_group / destroy_process_group and the backend registry, in one process
// (the default group is per process; multi-process runs are in multiprocess_test.cc).
#include "tdist/distributed.h"

#include <gtest/gtest.h>

#include <string>

#include "rendezvous/test_util.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"

namespace tdist {
namespace {

using rdzv_test::FakeProcessGroup;
using rdzv_test::free_port;
using rdzv_test::kFakeBackend;
using rdzv_test::register_fake_backend;
using rdzv_test::ScopedEnv;
using std::chrono::milliseconds;

// Leaves no default group behind, whatever the test did.
class RendezvousInitProcessGroup : public ::testing::Test {
 protected:
  void SetUp() override { register_fake_backend(); }
  void TearDown() override {
    if (is_initialized()) destroy_process_group();
  }
  ScopedEnv env_;
};

template <typename E, typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

TEST_F(RendezvousInitProcessGroup, UnknownBackendIsRejectedBeforeTheRendezvous) {
  // Nobody listens on the URL's port: reaching the rendezvous would take the whole timeout.
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port()) + "?rank=1&world_size=2";
  auto start = Clock::now();
  std::string msg = message_of<InvalidArgument>(
      [&] { init_process_group("ucc", url, -1, -1, milliseconds(20'000)); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(msg.find("backend 'ucc' is not available; registered backends: "), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("fake"), std::string::npos) << msg;
  EXPECT_FALSE(is_initialized());
}

TEST_F(RendezvousInitProcessGroup, BadSettingIsRejectedBeforeTheRendezvous) {
  env_.set("TDIST_SHM_RING_BYTES", "0");
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_port()) + "?rank=1&world_size=2";
  auto start = Clock::now();
  std::string msg = message_of<InvalidArgument>(
      [&] { init_process_group("fake", url, -1, -1, milliseconds(20'000)); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(msg.find("TDIST_SHM_RING_BYTES='0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096..1073741824"), std::string::npos) << msg;
  EXPECT_FALSE(is_initialized());
}

TEST_F(RendezvousInitProcessGroup, WithAGivenStore) {
  auto store = std::make_shared<HashStore>();
  init_process_group("fake", "env://", 1, 0, milliseconds(5000), store);
  EXPECT_TRUE(is_initialized());
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_world_size(), 1);
  EXPECT_EQ(get_backend(), "fake");
  auto group = get_default_group();
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->timeout(), milliseconds(5000));
  auto* prefixed = dynamic_cast<PrefixStore*>(group->store().get());
  ASSERT_NE(prefixed, nullptr);
  EXPECT_EQ(prefixed->prefix(), "tdist/pg/0");
  EXPECT_EQ(prefixed->base(), store);

  std::string msg = message_of<Error>(
      [&] { init_process_group("fake", "env://", 1, 0, milliseconds(5000), store); });
  EXPECT_NE(msg.find("already initialized"), std::string::npos) << msg;
  EXPECT_NE(msg.find("call destroy_process_group first"), std::string::npos) << msg;
  EXPECT_EQ(get_rank(), 0);  // the failed call left the group alone

  destroy_process_group();
  EXPECT_FALSE(is_initialized());
  // A second init on the same store gets the next namespace.
  init_process_group("FAKE", "env://", 1, 0, milliseconds(5000), store);
  EXPECT_EQ(dynamic_cast<PrefixStore*>(get_default_group()->store().get())->prefix(), "tdist/pg/1");
}

TEST_F(RendezvousInitProcessGroup, GettersBeforeInitThrow) {
  EXPECT_FALSE(is_initialized());
  std::string msg = message_of<Error>([] { get_rank(); });
  EXPECT_NE(msg.find("not initialized; call init_process_group first"), std::string::npos) << msg;
  EXPECT_THROW(get_world_size(), Error);
  EXPECT_THROW(get_backend(), Error);
  EXPECT_THROW(get_default_group(), Error);
  EXPECT_THROW(destroy_process_group(), Error);
}

TEST_F(RendezvousInitProcessGroup, GivenStoreNeedsRankAndWorldSize) {
  auto store = std::make_shared<HashStore>();
  std::string msg = message_of<InvalidArgument>(
      [&] { init_process_group("fake", "env://", -1, 0, milliseconds(1000), store); });
  EXPECT_NE(msg.find("world_size"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>(
      [&] { init_process_group("fake", "env://", 2, -1, milliseconds(1000), store); });
  EXPECT_NE(msg.find("rank"), std::string::npos) << msg;
  EXPECT_FALSE(is_initialized());
}

TEST_F(RendezvousInitProcessGroup, BadInitMethodLeavesNothingInitialized) {
  EXPECT_THROW(init_process_group("fake", "env://", 1, 0, milliseconds(1000)), InvalidArgument);
  EXPECT_FALSE(is_initialized());
  // ... and init works afterwards.
  env_.set("MASTER_ADDR", "127.0.0.1");
  env_.set("MASTER_PORT", std::to_string(free_port()));
  env_.set("RANK", "0");
  env_.set("WORLD_SIZE", "1");
  init_process_group("fake");
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_world_size(), 1);
  EXPECT_EQ(get_default_group()->timeout(), default_pg_timeout());
}

TEST_F(RendezvousInitProcessGroup, FailingFactoryLeavesNothingInitialized) {
  if (!has_backend("failing")) {
    register_backend(
        "failing",
        [](std::shared_ptr<Store>, int, int, milliseconds) -> std::shared_ptr<ProcessGroup> {
          throw PeerError("the backend could not connect");
        });
  }
  if (!has_backend("null")) {
    register_backend("null", [](std::shared_ptr<Store>, int, int, milliseconds) {
      return std::shared_ptr<ProcessGroup>();
    });
  }
  auto store = std::make_shared<HashStore>();
  EXPECT_THROW(init_process_group("failing", "", 1, 0, milliseconds(1000), store), PeerError);
  EXPECT_FALSE(is_initialized());
  std::string msg =
      message_of<Error>([&] { init_process_group("null", "", 1, 0, milliseconds(1000), store); });
  EXPECT_NE(msg.find("returned no process group"), std::string::npos) << msg;
  EXPECT_FALSE(is_initialized());
  init_process_group("fake", "", 1, 0, milliseconds(1000), store);
  EXPECT_TRUE(is_initialized());
}

TEST(RendezvousBackendRegistry, RegisterLookUpAndReject) {
  register_fake_backend();
  EXPECT_TRUE(has_backend("fake"));
  EXPECT_TRUE(has_backend("Fake"));
  EXPECT_FALSE(has_backend("nonexistent"));
  auto factory = [](std::shared_ptr<Store> store, int rank, int size, milliseconds timeout) {
    return std::make_shared<FakeProcessGroup>(std::move(store), rank, size, timeout);
  };
  std::string msg = message_of<InvalidArgument>([&] { register_backend("FAKE", factory); });
  EXPECT_NE(msg.find("'fake' is already registered"), std::string::npos) << msg;
  EXPECT_THROW(register_backend("", factory), InvalidArgument);
  EXPECT_THROW(register_backend("cpu:gloo", factory), InvalidArgument);
  EXPECT_THROW(register_backend("a b", factory), InvalidArgument);
  EXPECT_THROW(register_backend("empty", BackendFactory()), InvalidArgument);
  EXPECT_FALSE(has_backend("empty"));

  if (!has_backend("Zeta")) register_backend("Zeta", factory);
  auto names = registered_backends();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "zeta"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), kFakeBackend), names.end());
  EXPECT_THROW(backend_factory("nope"), InvalidArgument);
}

TEST(RendezvousBackendRegistry, ProcessGroupValidatesItsArguments) {
  auto store = std::make_shared<HashStore>();
  milliseconds t(1000);
  EXPECT_THROW(FakeProcessGroup(nullptr, 0, 1, t), InvalidArgument);
  EXPECT_THROW(FakeProcessGroup(store, 0, 0, t), InvalidArgument);
  EXPECT_THROW(FakeProcessGroup(store, 2, 2, t), InvalidArgument);
  EXPECT_THROW(FakeProcessGroup(store, -1, 2, t), InvalidArgument);
  EXPECT_THROW(FakeProcessGroup(store, 0, 2, milliseconds(-1)), InvalidArgument);
  FakeProcessGroup group(store, 1, 2, t);
  EXPECT_EQ(group.rank(), 1);
  EXPECT_EQ(group.size(), 2);
  EXPECT_EQ(group.store(), store);
  EXPECT_EQ(group.timeout(), t);
  EXPECT_EQ(group.backend_name(), "fake");
}

}  // namespace
}  // namespace tdist
