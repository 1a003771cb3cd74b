// monitored_barrier on real processes under mpirun: every rank arrives (repeatedly, on
// the default group), and the last rank stays away from a fresh group's call, which
// every other rank then reports naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "mpi/mpi_suite.h"
#include "tdist/error.h"

namespace tdist::mpi_test {
namespace {

using std::chrono::milliseconds;

TEST(MpiSuiteMonitoredBarrier, AllRanksArrive) {
  ProcessGroup& pg = world();
  for (int i = 0; i < 5; ++i) {
    try {
      pg.monitored_barrier(milliseconds(10'000), /*wait_all_ranks=*/i % 2 == 1);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << pg.rank() << " call " << i << ": " << e.what();
    }
  }
}

TEST(MpiSuiteMonitoredBarrier, MissingRankIsNamed) {
  ProcessGroup& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<int> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(r);
  std::shared_ptr<ProcessGroup> fresh = pg.new_group(all);  // its own call count
  ASSERT_NE(fresh, nullptr);
  const int missing = pg.size() - 1;
  if (pg.rank() != missing) {
    const std::string want = "monitored_barrier #0 (group of " + std::to_string(pg.size()) + ", " +
                             backend() + "): rank " + std::to_string(missing) +
                             " did not arrive within 300 ms";
    try {
      fresh->monitored_barrier(milliseconds(300));
      ADD_FAILURE() << "rank " << pg.rank() << ": no error although rank " << missing
                    << " stayed away";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // The group is dropped on every rank alike; the world's next collective pairs up.
  pg.barrier()->wait();
}

}  // namespace
}  // namespace tdist::mpi_test
