// The fixtures of the Comm conformance suite: every case runs once per factory of
// comm_factories.h (and, for CommWorldTest, once per world size too), so each transport
// is held to the same contract (transport/comm.h). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "comm_factories.h"
#include "tdist/deadline.h"

namespace tdist::transport::testing {

// A deadline for an operation that must succeed: far enough never to be met on a loaded
// machine, short enough that a hang fails long before the test's own timeout.
inline Deadline op_deadline() { return Deadline::after(std::chrono::seconds(20)); }

// A case that runs against one factory.
class CommTest : public ::testing::TestWithParam<CommFactory> {
 protected:
  const CommFactory& factory() const { return GetParam(); }
  // Runs body(comm) on `world` ranks as threads (comm_factories.h).
  void run(int world, const std::function<void(Comm&)>& body,
           const CommTestOptions& options = {}) const {
    run_factory_ranks(factory(), world, body, options);
  }
  std::unique_ptr<Comm> connect(std::shared_ptr<Store> store, int rank, int world,
                                const CommTestOptions& options = {}) const {
    return factory().connect(std::move(store), rank, world, options);
  }
};

inline std::string factory_case_name(const ::testing::TestParamInfo<CommFactory>& info) {
  return info.param.name;
}

// A case that runs against one factory on several world sizes.
class CommWorldTest : public ::testing::TestWithParam<std::tuple<CommFactory, int>> {
 protected:
  const CommFactory& factory() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
};

inline std::string factory_world_case_name(
    const ::testing::TestParamInfo<std::tuple<CommFactory, int>>& info) {
  return std::get<0>(info.param).name + "_world" + std::to_string(std::get<1>(info.param));
}

}  // namespace tdist::transport::testing

// Runs every TEST_P of `suite` (derived from CommTest) against every factory.
#define TDIST_FOR_EVERY_COMM_FACTORY(suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Transports, suite,                                                  \
                           ::testing::ValuesIn(::tdist::transport::testing::comm_factories()), \
                           ::tdist::transport::testing::factory_case_name)
