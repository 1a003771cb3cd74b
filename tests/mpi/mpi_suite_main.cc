// main of the mpirun suite (mpi_suite.h): `mpirun -np N mpi_suite --backend mpi|tcp
// [gtest flags]`. Rank 0 prints GoogleTest's usual report; other ranks print only their
// failures, prefixed with the rank. Each rank exits non-zero when one of its tests
// failed, so mpirun (and the CTest test) fails when any rank does.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "mpi/mpi_suite.h"
#include "tdist/distributed.h"

namespace tdist::mpi_test {
namespace {

std::string g_backend;

// The failures of a rank other than 0, one line each, naming the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

ProcessGroup& world() { return *get_default_group(); }
const std::string& backend() { return g_backend; }

}  // namespace tdist::mpi_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      tdist::mpi_test::g_backend = argv[++i];
    }
  }
  if (tdist::mpi_test::g_backend.empty()) {
    std::fprintf(stderr, "usage: mpirun -np N %s --backend mpi|tcp [gtest flags]\n", argv[0]);
    return 2;
  }
  tdist::init_process_group(tdist::mpi_test::g_backend, "env://", -1, -1, std::chrono::seconds(60));
  const int rank = tdist::get_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tdist::mpi_test::RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  // Every rank finishes its tests before any tears the group down.
  tdist::get_default_group()->barrier()->wait();
  tdist::destroy_process_group();
  return result;
}
