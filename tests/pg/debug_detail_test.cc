// TDIST_DEBUG=detail (ProcessGroup's detail check, diag/detail_check.cc) over the backend
// under test, ranks as threads: every collective's fingerprint, with what the caller adds
// (CollectiveDetail), is compared across the ranks before anything is sent. A mismatch is a
// DesyncError on every rank quoting rank 0's call and the first rank's that differs, even
// where the wire could not tell (same sizes); the group stays usable; a rank that never
// calls is named by a TimeoutError.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "diag/flight_recorder.h"
#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

// Groups read TDIST_DEBUG when they are made: every group of this binary checks.
const bool kDetail = ::setenv("TDIST_DEBUG", "detail", 1) == 0;

std::string what(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

bool is_desync(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const DesyncError&) {
    return true;
  } catch (...) {
    return false;
  }
}

TEST(DebugDetail, AgreeingCollectivesRunAndLeaveOneKeyPerRank) {
  ASSERT_TRUE(kDetail);
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  const int64_t keys_before = world.store()->num_keys();
  world.run([](int rank, ProcessGroup& pg) {
    for (int i = 0; i < 20; ++i) {
      std::vector<float> x(16, static_cast<float>(rank));
      const CollectiveDetail shape("shape [4, 4]");
      pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
      EXPECT_EQ(x[0], 3.0f);
      pg.barrier()->wait();
    }
  });
  // The last check's keys stay (one per rank); the earlier ones are gone.
  EXPECT_EQ(world.store()->num_keys(), keys_before + 3);
}

// sum on rank 1, max elsewhere: the same bytes on the wire, so only the check sees it.
TEST(DebugDetail, ADifferentReduceOpIsADesyncErrorOnEveryRankAndTheGroupGoesOn) {
  ThreadWorld world(3);
  ASSERT_TRUE(world.ok());
  auto errors = world.run_collect([](int rank, ProcessGroup& pg) {
    std::vector<int32_t> x(8, rank);
    pg.all_reduce(x.data(), x.size(), DType::kI32,
                  rank == 1 ? ReduceOpKind::kSum : ReduceOpKind::kMax)
        ->wait();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(errors[static_cast<size_t>(r)], nullptr) << "rank " << r;
    EXPECT_TRUE(is_desync(errors[static_cast<size_t>(r)])) << what(errors[static_cast<size_t>(r)]);
    const std::string text = what(errors[static_cast<size_t>(r)]);
    // detail includes callsite: both sides name their line.
    EXPECT_NE(text.find("rank 0 called all_reduce #0 i32 x8 max at debug_detail_test.cc:"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("; rank 1 called all_reduce #0 i32 x8 sum at debug_detail_test.cc:"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("TDIST_DEBUG=detail"), std::string::npos) << text;
  }
  // Nothing was sent: the next collective runs, numbered #0 again.
  world.run([](int rank, ProcessGroup& pg) {
    std::vector<int32_t> x(8, rank);
    pg.all_reduce(x.data(), x.size(), DType::kI32, ReduceOpKind::kMax)->wait();
    EXPECT_EQ(x[7], 2);
    const auto summary = pg.flight_recorder().summary();
    EXPECT_TRUE(summary.has_last);
    EXPECT_EQ(summary.last_seq, 0u);
  });
}

TEST(DebugDetail, WhatTheCallerAddsJoinsTheFingerprint) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  auto errors = world.run_collect([](int rank, ProcessGroup& pg) {
    std::vector<float> x(1024, 1.0f);
    const CollectiveDetail outer("unused");
    const CollectiveDetail shape(rank == 0 ? "shape [32, 32]" : "shape [1024]");
    pg.broadcast(x.data(), x.size(), DType::kF32, 0)->wait();
  });
  for (int r = 0; r < 2; ++r) {
    const std::string text = what(errors[static_cast<size_t>(r)]);
    EXPECT_TRUE(is_desync(errors[static_cast<size_t>(r)])) << text;
    // The call site (detail includes callsite) comes last.
    EXPECT_NE(text.find("rank 0 called broadcast #0 f32 x1024 root 0 shape [32, 32] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("; rank 1 called broadcast #0 f32 x1024 root 0 shape [1024] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << text;
  }
  EXPECT_EQ(CollectiveDetail::current(), "");  // the scopes ended
}

TEST(DebugDetail, ARankThatNeverCallsIsNamedByTheTimeout) {
  ThreadWorld world(3, std::chrono::milliseconds(300));
  ASSERT_TRUE(world.ok());
  auto errors = world.run_collect([](int rank, ProcessGroup& pg) {
    if (rank == 2) return;
    pg.barrier()->wait();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(errors[static_cast<size_t>(r)], nullptr) << "rank " << r;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const TimeoutError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("check of barrier #0 at debug_detail_test.cc:"), std::string::npos)
          << text;
      EXPECT_NE(text.find(": not called within 300 ms by rank 2"), std::string::npos) << text;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": not a TimeoutError: " << e.what();
    }
  }
  EXPECT_EQ(errors[2], nullptr);
}

}  // namespace
}  // namespace tdist::pg_test
