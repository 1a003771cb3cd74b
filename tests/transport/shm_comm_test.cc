// What only the shared-memory transport has (the cases every transport shares are the
// conformance suite's, comm_conformance_*_test.cc): the host key, stray connections to a
// rank's abstract socket rejected by the handshake, and a setup timeout that suggests
// the missing rank is on another host.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/fd.h"
#include "shm_test_util.h"
#include "support/scoped_env.h"
#include "tdist/error.h"
#include "transport/shm/single_copy.h"

namespace tdist::transport::testing {
namespace {

using namespace std::chrono_literals;

// Unset, TDIST_SHM_SINGLE_COPY_BYTES is the default where this machine's kernel copy pays
// (measured once: the same answer every time) and off where it does not; a value given
// holds either way.
TEST(ShmCommTest, SingleCopyIsOnWhereItPaysUnlessTheSettingSaysOtherwise) {
  using test_support::ScopedEnv;
  const bool pays = shm::single_copy_pays();
  EXPECT_EQ(pays, shm::single_copy_pays());
  {
    ScopedEnv unset("TDIST_SHM_SINGLE_COPY_BYTES", std::nullopt);
    EXPECT_EQ(ShmCommOptions::from_settings().single_copy_bytes,
              pays ? size_t{1} << 20 : size_t{0});
  }
  {
    ScopedEnv given("TDIST_SHM_SINGLE_COPY_BYTES", "4096");
    EXPECT_EQ(ShmCommOptions::from_settings().single_copy_bytes, 4096u);
  }
  {
    ScopedEnv off("TDIST_SHM_SINGLE_COPY_BYTES", "0");
    EXPECT_EQ(ShmCommOptions::from_settings().single_copy_bytes, 0u);
  }
}

TEST(ShmCommTest, HostKeyIsStableAndNamesBootIdAndHost) {
  const std::string key = shm_host_key();
  EXPECT_EQ(key, shm_host_key());
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  EXPECT_NE(key.find(host), std::string::npos) << key;
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  EXPECT_EQ(key.rfind(boot_id, 0), 0u) << key;
}

TEST(ShmCommSetupTest, TimeoutNamesTheMissingRank) {
  auto store = std::make_shared<HashStore>();
  ShmCommOptions options = shm_options();
  options.timeout = 500ms;
  std::string what0;
  std::string what1;
  std::thread t0(
      [&] { what0 = error_of<TimeoutError>([&] { connect_shm_comm(store, 0, 3, options); }); });
  what1 = error_of<TimeoutError>([&] { connect_shm_comm(store, 1, 3, options); });
  t0.join();
  EXPECT_NE(what0.find("rank 2: it never connected"), std::string::npos) << what0;
  EXPECT_EQ(what0.find("rank 1:"), std::string::npos) << what0;
  EXPECT_NE(what1.find("rank 2: it never connected"), std::string::npos) << what1;
}

TEST(ShmCommSetupTest, StrayConnectionsAreRejectedAndSetupStillCompletes) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Comm>> comms(3);
  // The host keys of ranks 1 and 2, so that rank 0 starts linking before they arrive.
  store->set("host_key/1", shm_host_key());
  store->set("host_key/2", shm_host_key());
  std::thread t0([&] { comms[0] = connect_shm_comm(store, 0, 3, shm_options()); });
  // Strangers connect to rank 0's socket: one sends garbage, one closes at once.
  Bytes nonce_bytes = store->get("shm/nonce", Deadline::after(10s));
  uint64_t nonce = 0;
  std::memcpy(&nonce, nonce_bytes.data(), sizeof(nonce));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  int n = std::snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "tdist-shm-%016llx-0",
                        static_cast<unsigned long long>(nonce));
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  std::vector<net::Fd> strangers;
  for (int i = 0; i < 2; ++i) {
    net::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const auto give_up = Clock::now() + 10s;
    while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      ASSERT_LT(Clock::now(), give_up) << std::strerror(errno);
      std::this_thread::sleep_for(5ms);
    }
    strangers.push_back(std::move(fd));
  }
  std::string junk(40, 'x');
  ASSERT_EQ(::send(strangers[0].get(), junk.data(), junk.size(), 0), 40);
  strangers[1].reset();
  std::thread t1([&] { comms[1] = connect_shm_comm(store, 1, 3, shm_options()); });
  std::thread t2([&] { comms[2] = connect_shm_comm(store, 2, 3, shm_options()); });
  t0.join();
  t1.join();
  t2.join();
  for (auto& c : comms) ASSERT_NE(c, nullptr);
  uint32_t v = 5;
  uint32_t got = 0;
  auto r = comms[0]->irecv(2, 1, &got, 4);
  comms[2]->isend(0, 1, &v, 4)->wait(Deadline::after(10s));
  r->wait(Deadline::after(10s));
  EXPECT_EQ(got, 5u);
}

}  // namespace
}  // namespace tdist::transport::testing
