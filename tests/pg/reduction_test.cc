// all_reduce, reduce and reduce_scatter of the "tcp" backend, ranks as threads: every
// dtype x every op valid for it x counts 0, 1, 3, 1023, in place and out of place, at
// several world sizes, against the independent reference of pg_reduce_ref.h; and the
// large count (1Mi+1) for a few (dtype, op). Every buffer carries guard bytes.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "pg/pg_reduce_ref.h"
#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

constexpr size_t kSmallCounts[] = {0, 1, 3, 1023};
constexpr size_t kLargeCount = (size_t{1} << 20) + 1;

// Reports one failed case (at most a few per test, so a broken backend stays readable).
void report(int rank, const char* coll, const std::string& name, const std::string& what) {
  ADD_FAILURE() << "rank " << rank << ": " << coll << " " << name << ": " << what;
}

void all_reduce_case(int rank, ProcessGroup& pg, DType t, ReduceOp op, size_t count, bool in_place,
                     uint64_t seed) {
  const std::string name = case_name(t, op, count, in_place);
  Buffer send(t, count);
  Buffer recv(t, count);
  fill_inputs(t, op, rank, send.data(), count, 0, seed);
  if (in_place) {
    pg.all_reduce(send.data(), count, t, op)->wait();
  } else {
    pg.all_reduce(send.data(), recv.data(), count, t, op)->wait();
    if (!inputs_intact(t, op, rank, send.data(), count, 0, seed)) {
      report(rank, "all_reduce", name, "the send buffer was modified");
    }
  }
  Buffer& out = in_place ? send : recv;
  std::string bad = check_reduction(t, op, pg.size(), out.data(), count, 0, seed);
  if (!bad.empty()) report(rank, "all_reduce", name, bad);
  if (!send.guards_intact() || !recv.guards_intact()) {
    report(rank, "all_reduce", name, "guard bytes were overwritten");
  }
}

void reduce_case(int rank, ProcessGroup& pg, DType t, ReduceOp op, size_t count, bool in_place,
                 int root, uint64_t seed) {
  const std::string name = case_name(t, op, count, in_place) + "/root=" + std::to_string(root);
  Buffer send(t, count);
  Buffer recv(t, count);
  fill_inputs(t, op, rank, send.data(), count, 0, seed);
  if (in_place) {
    pg.reduce(send.data(), send.data(), count, t, op, root)->wait();
  } else {
    // recv may be null off the root; alternate between null and a buffer.
    void* out = rank == root || seed % 2 == 0 ? recv.data() : nullptr;
    pg.reduce(send.data(), out, count, t, op, root)->wait();
    if (!inputs_intact(t, op, rank, send.data(), count, 0, seed)) {
      report(rank, "reduce", name, "the send buffer was modified");
    }
  }
  if (rank == root) {
    Buffer& out = in_place ? send : recv;
    std::string bad = check_reduction(t, op, pg.size(), out.data(), count, 0, seed);
    if (!bad.empty()) report(rank, "reduce", name, bad);
  }
  if (!send.guards_intact() || !recv.guards_intact()) {
    report(rank, "reduce", name, "guard bytes were overwritten");
  }
}

void reduce_scatter_case(int rank, ProcessGroup& pg, DType t, ReduceOp op, size_t count,
                         uint64_t seed) {
  const std::string name = case_name(t, op, count, false);
  const size_t world = static_cast<size_t>(pg.size());
  Buffer send(t, world * count);
  Buffer recv(t, count);
  fill_inputs(t, op, rank, send.data(), world * count, 0, seed);
  pg.reduce_scatter(send.data(), recv.data(), count, t, op)->wait();
  if (!inputs_intact(t, op, rank, send.data(), world * count, 0, seed)) {
    report(rank, "reduce_scatter", name, "the send buffer was modified");
  }
  std::string bad = check_reduction(t, op, pg.size(), recv.data(), count,
                                    static_cast<size_t>(rank) * count, seed);
  if (!bad.empty()) report(rank, "reduce_scatter", name, bad);
  if (!send.guards_intact() || !recv.guards_intact()) {
    report(rank, "reduce_scatter", name, "guard bytes were overwritten");
  }
}

// (world size, TDIST_ALGO): every algorithm runs the whole cross product, not only the
// one the thresholds pick for small counts.
struct Setup {
  int world;
  const char* algo;  // TDIST_ALGO value; "" = chosen by size
  const char* label;
};

void PrintTo(const Setup& setup, std::ostream* os) {
  *os << "W" << setup.world << " TDIST_ALGO='" << setup.algo << "'";
}

class ReductionTest : public ::testing::TestWithParam<Setup> {
 protected:
  ReductionTest() : algo_("TDIST_ALGO", GetParam().algo) {}
  test_support::ScopedEnv algo_;
};

TEST_P(ReductionTest, AllReduceEveryDtypeOpAndSmallCount) {
  ThreadWorld world(GetParam().world);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 1;
    for (DType t : kAllDTypes) {
      for (ReduceOp op : ops_for(t)) {
        for (size_t count : kSmallCounts) {
          for (bool in_place : {false, true})
            all_reduce_case(rank, pg, t, op, count, in_place, ++seed);
        }
      }
    }
  });
}

TEST_P(ReductionTest, ReduceEveryDtypeOpAndSmallCountWithEveryRoot) {
  ThreadWorld world(GetParam().world);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 1000;
    int root = 0;
    for (DType t : kAllDTypes) {
      for (ReduceOp op : ops_for(t)) {
        for (size_t count : kSmallCounts) {
          for (bool in_place : {false, true}) {
            root = (root + 1) % pg.size();  // cycles through every root, 0 included
            reduce_case(rank, pg, t, op, count, in_place, root, ++seed);
          }
        }
      }
    }
  });
}

// reduce_scatter has one algorithm, so it runs per world size only.
class ReduceScatterTest : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterTest, EveryDtypeOpAndSmallCount) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 2000;
    for (DType t : kAllDTypes) {
      for (ReduceOp op : ops_for(t)) {
        for (size_t count : kSmallCounts) reduce_scatter_case(rank, pg, t, op, count, ++seed);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, ReduceScatterTest, ::testing::Values(1, 2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "W" + std::to_string(p.param);
                         });

std::vector<Setup> setups() {
  std::vector<Setup> out;
  for (int w : {1, 2, 3, 5, 8}) {
    out.push_back({w, "", "auto"});
    out.push_back({w, "all_reduce=ring,reduce=chain", "ring_chain"});
    out.push_back({w, "all_reduce=halving_doubling", "halving_doubling"});
  }
  return out;
}

std::string setup_name(const ::testing::TestParamInfo<Setup>& param) {
  return "W" + std::to_string(param.param.world) + "_" + param.param.label;
}

INSTANTIATE_TEST_SUITE_P(World, ReductionTest, ::testing::ValuesIn(setups()), setup_name);

// The large count (1Mi+1, not a multiple of anything) for a few (dtype, op).
class LargeReductionTest : public ::testing::TestWithParam<int> {};

TEST_P(LargeReductionTest, AllReduceReduceAndReduceScatter) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    // 65537 f32 and 100003 i32: halving-doubling when chosen by size.
    all_reduce_case(rank, pg, DType::kF32, ReduceOpKind::kSum, 65537, false, 10);
    all_reduce_case(rank, pg, DType::kI32, ReduceOpKind::kBand, 100003, true, 11);
    reduce_case(rank, pg, DType::kF32, ReduceOpKind::kMax, 65537, false, 1, 12);
    all_reduce_case(rank, pg, DType::kF32, ReduceOpKind::kSum, kLargeCount, false, 1);
    all_reduce_case(rank, pg, DType::kBF16, ReduceOpKind::kMax, kLargeCount, true, 2);
    all_reduce_case(rank, pg, DType::kI64, ReduceOpKind::kBxor, kLargeCount, false, 3);
    all_reduce_case(rank, pg, DType::kF16, ReduceOp::premul_sum(0.5), kLargeCount, true, 4);
    all_reduce_case(rank, pg, DType::kU8, ReduceOpKind::kAvg, kLargeCount, false, 5);
    reduce_case(rank, pg, DType::kF64, ReduceOpKind::kAvg, kLargeCount, false, pg.size() - 1, 6);
    reduce_case(rank, pg, DType::kI32, ReduceOpKind::kProd, kLargeCount, true, pg.size() / 2, 7);
    reduce_scatter_case(rank, pg, DType::kF32, ReduceOpKind::kSum, kLargeCount, 8);
    reduce_scatter_case(rank, pg, DType::kI8, ReduceOpKind::kMin, kLargeCount, 9);
  });
}

INSTANTIATE_TEST_SUITE_P(World, LargeReductionTest, ::testing::Values(2, 3, 4, 5), world_name);

}  // namespace
}  // namespace tdist::pg_test
