// The flight recorder (diag/flight_recorder.h) over each built-in backend, ranks as
// threads: what a group's record holds, its ring, the dump a failure writes, and
// tools/tdist_flight.py naming the first operation the ranks disagree on.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pg/pg_test_util.h"
#include "support/run_command.h"
#include "tdist/distributed.h"

namespace tdist::pg_test {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using test_support::run_command;

std::string merge_script() { return std::string(TDIST_SOURCE_DIR) + "/tools/tdist_flight.py"; }

// A fresh folder for dumps, with TDIST_FLIGHT_RECORDER_FILE pointing into it.
class DumpDir {
 public:
  DumpDir() {
    char name[] = "/tmp/tdist_flight_test_XXXXXX";
    dir_ = ::mkdtemp(name);
    prefix_ = dir_ + "/rank_";
    ::setenv("TDIST_FLIGHT_RECORDER_FILE", prefix_.c_str(), 1);
  }
  ~DumpDir() {
    ::unsetenv("TDIST_FLIGHT_RECORDER_FILE");
    std::filesystem::remove_all(dir_);
  }
  const std::string& prefix() const { return prefix_; }
  std::string file(int rank) const { return prefix_ + std::to_string(rank) + ".json"; }

 private:
  std::string dir_;
  std::string prefix_;
};

TEST(FlightRecorder, RecordsEveryCollectiveWithItsArgumentsAndState) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::vector<float> x(1024, 1.0f);
    pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
    pg.broadcast(x.data(), 8, DType::kF32, 1)->wait();
    pg.all_reduce(x.data(), 3, DType::kF32, ReduceOpKind::kMax)->wait();
    pg.barrier()->wait();
    const std::string record = pg.flight_record();
    EXPECT_TRUE(contains(record, "\"name\":\"default\"")) << record;
    EXPECT_TRUE(contains(record, "\"rank\":" + std::to_string(rank))) << record;
    EXPECT_TRUE(contains(record, "\"next_seq\":4")) << record;
    EXPECT_TRUE(contains(record,
                         "{\"seq\":0,\"op\":\"all_reduce\",\"dtype\":\"f32\",\"count\":1024,"
                         "\"reduce_op\":\"sum\",\"state\":\"completed\""))
        << record;
    EXPECT_TRUE(contains(record,
                         "{\"seq\":1,\"op\":\"broadcast\",\"dtype\":\"f32\",\"count\":8,"
                         "\"root\":1,\"state\":\"completed\""))
        << record;
    EXPECT_TRUE(contains(record,
                         "\"seq\":2,\"op\":\"all_reduce\",\"dtype\":\"f32\",\"count\":3,"
                         "\"reduce_op\":\"max\""))
        << record;
    EXPECT_TRUE(contains(record, "{\"seq\":3,\"op\":\"barrier\",\"state\":\"completed\""))
        << record;
    EXPECT_TRUE(contains(record, "\"started_ns\":") && contains(record, "\"finished_ns\":"));
  });
}

TEST(FlightRecorder, KeepsTheLastOperationsAndSubGroupsHaveTheirNames) {
  ::setenv("TDIST_FLIGHT_RECORDER_SIZE", "4", 1);
  ThreadWorld world(2);
  ::unsetenv("TDIST_FLIGHT_RECORDER_SIZE");
  ASSERT_TRUE(world.ok());
  world.run([](int, ProcessGroup& pg) {
    int32_t v = 1;
    for (int i = 0; i < 10; ++i) pg.all_reduce(&v, 1, DType::kI32)->wait();
    const std::string record = pg.flight_record();
    EXPECT_FALSE(contains(record, "\"seq\":5,")) << record;
    for (int seq = 6; seq < 10; ++seq) {
      EXPECT_TRUE(contains(record, "\"seq\":" + std::to_string(seq) + ",")) << record;
    }
    auto sub = pg.new_group({0, 1});
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->name(), "group/0");
    sub->all_reduce(&v, 1, DType::kI32)->wait();
    EXPECT_TRUE(contains(sub->flight_record(), "\"name\":\"group/0\""));
  });
}

// Rank 1 skips the second all_reduce: its third pairs with rank 0's second, and rank 0's
// third times out. The timeout writes both ranks' records (they live in this process);
// the merge names #2 and rank 1 as the one that never called it.
TEST(FlightRecorder, ATimeoutDumpsAndTheMergeNamesTheRankThatSkipped) {
  DumpDir dumps;
  ThreadWorld world(2, std::chrono::milliseconds(1500));
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    std::vector<float> x(64, 1.0f);
    const int calls = rank == 0 ? 3 : 2;
    for (int i = 0; i < calls; ++i) {
      WorkPtr w = pg.all_reduce(x.data(), x.size(), DType::kF32);
      if (rank == 0 && i == 2) {
        EXPECT_THROW(w->wait(), TimeoutError);
      } else {
        w->wait();
      }
    }
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  });
  ASSERT_TRUE(std::filesystem::exists(dumps.file(0))) << dumps.file(0);
  std::string out;
  EXPECT_EQ(run_command("python3 " + merge_script() + " " + dumps.prefix(), &out), 1) << out;
  EXPECT_TRUE(contains(out, "group default (" + test_backend() +
                                ", 2 ranks): first disagreement at #2 (not called by every rank)"))
      << out;
  EXPECT_TRUE(contains(out, "rank 0: all_reduce #2 f32 x64 sum, failed")) << out;
  EXPECT_TRUE(contains(out,
                       "rank 1: did not call #2 (its last: all_reduce #1 f32 x64 sum, "
                       "completed)"))
      << out;
}

TEST(FlightRecorder, OnRequestEveryGroupIsWrittenAndRanksThatAgreeSaySo) {
  DumpDir dumps;
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([](int, ProcessGroup& pg) {
    int32_t v = 1;
    pg.all_reduce(&v, 1, DType::kI32)->wait();
    pg.barrier()->wait();
  });
  const std::vector<std::string> paths = dump_flight_records();
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], dumps.file(0));
  std::ifstream in(paths[1]);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(contains(text.str(), "\"reason\":\"on request\"")) << text.str();
  std::string out;
  EXPECT_EQ(run_command("python3 " + merge_script() + " " + dumps.prefix(), &out), 0) << out;
  EXPECT_TRUE(contains(out, "the ranks agree on every recorded operation")) << out;
}

}  // namespace
}  // namespace tdist::pg_test
