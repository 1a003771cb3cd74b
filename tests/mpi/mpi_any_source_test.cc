// Receiving from any source (ProcessGroup::irecv_any, Work::source_rank) on real processes
// under mpirun, on every backend of the suite (mpi: MPI_ANY_SOURCE and MPI_Status).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "mpi/mpi_suite.h"
#include "tdist/process_group.h"

namespace tdist::mpi_test {
namespace {

std::vector<int32_t> payload_of(int src, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(src * 1000003 + i);
  return v;
}

// Every rank but 0 sends rank 0 one message on one tag, small and then 4 MiB; rank 0
// receives size - 1 times from any source and gets each sender once.
TEST(MpiSuiteAnySource, RankZeroGetsEverySenderOnce) {
  ProcessGroup& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  for (size_t count : {size_t{3}, size_t{1} << 20}) {
    // A tag per size: a sender's next (larger) message must not meet this round's
    // any-source receives.
    const uint32_t tag = count == 3 ? 21 : 22;
    if (pg.rank() != 0) {
      const std::vector<int32_t> out = payload_of(pg.rank(), count);
      pg.send(out.data(), count, DType::kI32, 0, tag);
      continue;
    }
    std::vector<int> seen(static_cast<size_t>(pg.size()), 0);
    for (int i = 1; i < pg.size(); ++i) {
      std::vector<int32_t> in(count, -1);
      WorkPtr w = pg.irecv_any(in.data(), count, DType::kI32, tag);
      try {
        w->wait(Deadline::after(std::chrono::seconds(60)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "irecv_any: " << e.what();
        continue;
      }
      const int from = w->source_rank();
      if (from < 1 || from >= pg.size()) {
        ADD_FAILURE() << "source_rank " << from;
        continue;
      }
      ++seen[static_cast<size_t>(from)];
      EXPECT_EQ(in, payload_of(from, count)) << "from rank " << from << ", " << count;
    }
    for (int r = 1; r < pg.size(); ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << r;
  }
  pg.barrier()->wait();  // keeps the next test's messages apart
}

// A receive of one source posted before a receive of any on the same tag takes that
// source's first message (MPI's posting order); irecv's Work names its src.
TEST(MpiSuiteAnySource, ReceiveOfOneSourceAndOfAnyOnOneTag) {
  ProcessGroup& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  int32_t go = 0;
  if (pg.rank() == 1) {
    pg.recv(&go, 1, DType::kI32, 0, 23);
    const int32_t a = 100;
    const int32_t b = 101;
    pg.send(&a, 1, DType::kI32, 0, 22);
    pg.send(&b, 1, DType::kI32, 0, 22);
  } else if (pg.rank() == 0) {
    int32_t first = -1;
    int32_t second = -1;
    WorkPtr of1 = pg.irecv(&first, 1, DType::kI32, 1, 22);
    WorkPtr any = pg.irecv_any(&second, 1, DType::kI32, 22);
    pg.send(&go, 1, DType::kI32, 1, 23);
    of1->wait();
    any->wait();
    EXPECT_EQ(first, 100);
    EXPECT_EQ(second, 101);
    EXPECT_EQ(of1->source_rank(), 1);
    EXPECT_EQ(any->source_rank(), 1);
  }
  pg.barrier()->wait();
}

}  // namespace
}  // namespace tdist::mpi_test
