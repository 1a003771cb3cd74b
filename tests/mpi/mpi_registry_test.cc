// The mpi backend's registration and the rendezvous layer's store agreement, in one
// process (no mpirun): with MPI, "mpi" is registered; without, asking for it says how to
// enable it. The built-in agreement is MPI's exactly in a build with MPI, without the
// registry being touched. env:// without MASTER_ADDR/MASTER_PORT uses the agreement it
// is given when that applies (a fake one here, standing in for MPI) and is unchanged
// otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backends/builtin.h"
#include "rendezvous/store_agreement.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/rendezvous.h"

namespace tdist {
namespace {

using rendezvous_detail::rendezvous_with_agreement;
using rendezvous_detail::StoreAgreement;

// Unsets the rendezvous variables for a test (before any thread starts) and restores them.
class CleanRendezvousEnv {
 public:
  CleanRendezvousEnv() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~CleanRendezvousEnv() {
    for (size_t i = 0; i < std::size(kNames); ++i) {
      if (saved_[i])
        ::setenv(kNames[i], saved_[i]->c_str(), 1);
      else
        ::unsetenv(kNames[i]);
    }
  }

 private:
  static constexpr const char* kNames[] = {"MASTER_ADDR",
                                           "MASTER_PORT",
                                           "TDIST_AGENT_STORE",
                                           "TDIST_USE_AGENT_STORE",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "OMPI_COMM_WORLD_SIZE"};
  std::vector<std::optional<std::string>> saved_;
};

TEST(MpiRegistryTest, MpiIsRegisteredExactlyWhenBuiltWithMpi) {
#if TDIST_HAVE_MPI
  EXPECT_TRUE(has_backend("mpi"));
  EXPECT_TRUE(has_backend("MPI"));
#else
  EXPECT_FALSE(has_backend("mpi"));
  try {
    backend_factory("mpi");
    ADD_FAILURE() << "backend_factory(\"mpi\") succeeded in a build without MPI";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("built without MPI"), std::string::npos) << what;
    EXPECT_NE(what.find("apt-get install libopenmpi-dev openmpi-bin"), std::string::npos) << what;
  }
#endif
  // Other unknown names get no MPI hint.
  try {
    backend_factory("ucc");
    ADD_FAILURE() << "backend_factory(\"ucc\") succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).find("MPI"), std::string::npos) << e.what();
  }
}

// Each TEST runs in a process of its own (gtest_discover_tests): this one never touches
// the registry, so the agreement cannot come from the registry's first use.
TEST(MpiRegistryTest, TheBuiltinAgreementIsMpisWithoutTheRegistry) {
  CleanRendezvousEnv env;
  std::optional<StoreAgreement> agreement = backends::builtin_store_agreement();
#if TDIST_HAVE_MPI
  ASSERT_TRUE(agreement.has_value());
  EXPECT_EQ(agreement->name, "MPI");
  EXPECT_FALSE(rendezvous_detail::applies(&*agreement));  // not under mpirun
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_TRUE(rendezvous_detail::applies(&*agreement));
#else
  EXPECT_FALSE(agreement.has_value());
#endif
}

TEST(MpiRegistryTest, EnvWithoutMasterUsesAnApplicableAgreement) {
  CleanRendezvousEnv env;
  int hosted = 0;
  const StoreAgreement fake{"fake", [] { return true; },
                            [&](const std::function<uint16_t()>& host_store) {
                              ++hosted;
                              return "127.0.0.1:" + std::to_string(host_store());
                            }};
  RendezvousResult r = rendezvous_with_agreement("env://?rank=0&world_size=1", -1, -1,
                                                 std::chrono::seconds(10), &fake);
  EXPECT_EQ(hosted, 1);
  ASSERT_NE(r.store, nullptr);
  r.store->set("k", "v");
  EXPECT_EQ(to_string(r.store->get("k")), "v");
}

TEST(MpiRegistryTest, AgreementIsNotUsedWhenItDoesNotApplyOrOneVariableIsSet) {
  CleanRendezvousEnv env;
  bool called = false;
  auto agree = [&](const std::function<uint16_t()>&) {
    called = true;
    return std::string("127.0.0.1:1");
  };
  const StoreAgreement not_here{"fake", [] { return false; }, agree};
  const StoreAgreement here{"fake", [] { return true; }, agree};
  for (const StoreAgreement* agreement : {&not_here, static_cast<const StoreAgreement*>(nullptr)}) {
    try {
      rendezvous_with_agreement("env://?rank=0&world_size=1", -1, -1, std::chrono::seconds(5),
                                agreement);
      ADD_FAILURE() << "env:// without MASTER_ADDR succeeded";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    }
  }
  // An applicable agreement, but MASTER_ADDR alone is set: still an error about MASTER_PORT.
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  try {
    rendezvous_with_agreement("env://?rank=0&world_size=1", -1, -1, std::chrono::seconds(5), &here);
    ADD_FAILURE() << "env:// without MASTER_PORT succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(called);
}

TEST(MpiRegistryTest, AnAgreementErrorReachesTheCaller) {
  CleanRendezvousEnv env;
  const StoreAgreement failing{"fake", [] { return true; },
                               [](const std::function<uint16_t()>&) -> std::string {
                                 TDIST_THROW(Error, "the launcher's channel is down");
                               }};
  try {
    rendezvous_with_agreement("env://?rank=0&world_size=1", -1, -1, std::chrono::seconds(5),
                              &failing);
    ADD_FAILURE() << "rendezvous succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("channel is down"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tdist
