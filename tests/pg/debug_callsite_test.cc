// TDIST_DEBUG=callsite (ProcessGroup::debug_callsite()) over the backend under test, ranks as
// threads: each collective's call site joins its fingerprint, so a rank that skips one call
// in a loop is named at the first call where the ranks' lines differ, on every rank, with
// both lines; a CallSite scope names its caller's line instead of the line inside it (the
// outermost scope wins); ranks that call from the same lines run as without it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

// Groups read TDIST_DEBUG when they are made: every group of this binary checks call sites.
const bool kCallsite = ::setenv("TDIST_DEBUG", "callsite", 1) == 0;

std::string at(int line) { return "at debug_callsite_test.cc:" + std::to_string(line); }

// At `count` floats (1 Ki and 1 Mi: the text names x1024 or x1048576), within 5 s.
void expect_skip_named(size_t count) {
  ASSERT_TRUE(kCallsite);
  ThreadWorld world(2, std::chrono::seconds(60));
  ASSERT_TRUE(world.ok());
  int first_line[2] = {0, 0};  // by rank: each thread writes its own
  int second_line[2] = {0, 0};
  const auto start = std::chrono::steady_clock::now();
  auto errors = world.run_collect([&](int rank, ProcessGroup& pg) {
    ASSERT_TRUE(pg.debug_callsite());
    std::vector<float> x(count, 1.0f);
    for (int step = 0; step < 3; ++step) {
      // Rank 1 skips the first call of step 1: its #2 is the second call, rank 0's the first.
      if (rank != 1 || step != 1) {
        first_line[rank] = __LINE__ + 1;
        pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
      }
      second_line[rank] = __LINE__ + 1;
      pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
    }
  });
  EXPECT_LE(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string op = "all_reduce #2 f32 x" + std::to_string(count) + " sum ";
  const std::string expected =
      "rank 0 called " + op + at(first_line[0]) + "; rank 1 called " + op + at(second_line[1]);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(errors[static_cast<size_t>(r)], nullptr) << "rank " << r;
    const std::string text = describe(errors[static_cast<size_t>(r)]);
    EXPECT_TRUE(is_a<DesyncError>(errors[static_cast<size_t>(r)])) << text;
    EXPECT_NE(text.find(expected), std::string::npos) << "rank " << r << ": " << text;
  }
}

TEST(DebugCallsite, ARankThatSkipsACallInALoopIsNamedWhereTheLinesDiffer1Ki) {
  expect_skip_named(1024);
}
TEST(DebugCallsite, ARankThatSkipsACallInALoopIsNamedWhereTheLinesDiffer1Mi) {
  expect_skip_named(size_t{1} << 20);
}

// A helper that issues the collective for its callers, as the torch layer does.
void helper_all_reduce(ProcessGroup& pg, std::vector<float>& x,
                       SourceLocation where = SourceLocation::current()) {
  const CallSite site(where);
  const CallSite inner(SourceLocation::current());  // not the outermost: unused
  pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
}

TEST(DebugCallsite, TheOutermostCallSiteNamesTheCallersLine) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  int lines[2] = {0, 0};
  auto errors = world.run_collect([&](int rank, ProcessGroup& pg) {
    std::vector<float> x(8, 1.0f);
    if (rank == 0) {
      lines[0] = __LINE__ + 1;
      helper_all_reduce(pg, x);
    } else {
      lines[1] = __LINE__ + 1;
      helper_all_reduce(pg, x);
    }
  });
  const std::string expected = "rank 0 called all_reduce #0 f32 x8 sum " + at(lines[0]) +
                               "; rank 1 called all_reduce #0 f32 x8 sum " + at(lines[1]);
  for (int r = 0; r < 2; ++r) {
    const std::string text = describe(errors[static_cast<size_t>(r)]);
    EXPECT_TRUE(is_a<DesyncError>(errors[static_cast<size_t>(r)])) << text;
    EXPECT_NE(text.find(expected), std::string::npos) << "rank " << r << ": " << text;
  }
  EXPECT_EQ(CallSite::outermost(), nullptr);  // the scopes ended
}

TEST(DebugCallsite, RanksCallingFromTheSameLinesRunAsWithoutIt) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    for (int step = 0; step < 20; ++step) {
      std::vector<int32_t> x(16, rank);
      pg.all_reduce(x.data(), x.size(), DType::kI32)->wait();
      EXPECT_EQ(x[15], 3);
      std::vector<int32_t> y(16, rank == 2 ? step : -1);
      pg.broadcast(y.data(), y.size(), DType::kI32, 2)->wait();
      EXPECT_EQ(y[0], step);
      std::vector<float> z(1, 1.0f);
      helper_all_reduce(pg, z);
      EXPECT_EQ(z[0], 3.0f);
      pg.barrier()->wait();
    }
  });
}

}  // namespace
}  // namespace tdist::pg_test
