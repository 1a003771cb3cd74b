// The timeline (TDIST_TRACE, diag/trace.h) with ranks as threads: every collective of
// every group is one complete event in its rank's file (pid = global rank, the group's
// track named by a thread_name event), with seq, dtype, count, bytes, root and reduce op;
// a failed one carries its error; the file is complete JSON after every write, and a
// later write appends to it. TDIST_TRACE is read once per process, so every test sets it
// (to the same folder) before it makes a group: each test must find its own operations
// among those of the tests before it (when the binary runs them in one process).
#include "diag/trace.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

using nlohmann::json;

const std::string& trace_dir() {
  static const std::string dir = [] {
    char name[] = "/tmp/tdist_trace_test_XXXXXX";
    std::string d = ::mkdtemp(name);
    ::setenv("TDIST_TRACE", d.c_str(), 1);
    ::setenv("TDIST_FLIGHT_RECORDER_FILE", (d + "/flight_").c_str(), 1);
    return d;
  }();
  return dir;
}

// Removes the folder when the binary ends.
struct Cleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(trace_dir(), ignored);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

json read_trace(int rank) {
  const std::string path = trace_dir() + "/tdist_trace_rank" + std::to_string(rank) + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (fails the test) unless it is complete JSON
}

// The complete events of `rank`'s file whose args match every field of `where`.
std::vector<json> events(const json& trace, const json& where) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    bool match = true;
    for (const auto& [key, value] : where.items()) {
      if (key == "name") {
        match = match && e.at("name") == value;
      } else {
        match = match && e.at("args").contains(key) && e.at("args").at(key) == value;
      }
    }
    if (match) out.push_back(e);
  }
  return out;
}

// The name of track `tid` of `pid` (its thread_name metadata event).
std::string track_name(const json& trace, int pid, int tid) {
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == pid &&
        e.at("tid") == tid) {
      return e.at("args").at("name");
    }
  }
  return "";
}

TEST(Trace, EveryCollectiveIsOneCompleteEventOnItsGroupsTrack) {
  trace_dir();
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  ASSERT_TRUE(diag::trace_enabled());
  world.run([](int rank, ProcessGroup& pg) {
    std::vector<float> x(1024, 1.0f);
    pg.all_reduce(x.data(), x.size(), DType::kF32)->wait();
    std::vector<int32_t> y(8, rank);
    pg.broadcast(y.data(), y.size(), DType::kI32, 1)->wait();
    std::vector<double> g(3 + 2, 0.0);
    const std::vector<size_t> counts = {2, 3};
    pg.all_gatherv(g.data() + (rank == 0 ? 0 : 2), counts[static_cast<size_t>(rank)], g.data(),
                   counts, DType::kF64)
        ->wait();
    pg.reduce(x.data(), x.data(), 7, DType::kF32, ReduceOpKind::kMax, 0)->wait();
    pg.barrier()->wait();
    auto sub = pg.new_group({0, 1});
    ASSERT_NE(sub, nullptr);
    int64_t v = 1;
    sub->all_reduce(&v, 1, DType::kI64, ReduceOpKind::kMin)->wait();
  });
  diag::flush_trace();  // (the sub-groups' destruction wrote most already)
  const std::string backend = test_backend();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json trace = read_trace(rank);
    EXPECT_EQ(trace.at("otherData").at("rank"), rank);
    EXPECT_EQ(trace.at("otherData").at("ts_base"), "unix_epoch_us");
    EXPECT_TRUE(trace.at("otherData").at("wall_ns").is_number_integer());

    auto ar = events(trace, {{"name", "all_reduce"}, {"group", "default"}, {"count", 1024}});
    ASSERT_EQ(ar.size(), 1u) << trace.dump(1);
    const json& e = ar[0];
    EXPECT_EQ(e.at("pid"), rank);
    EXPECT_EQ(e.at("cat"), "collective");
    EXPECT_EQ(e.at("args").at("seq"), 0);
    EXPECT_EQ(e.at("args").at("dtype"), "f32");
    EXPECT_EQ(e.at("args").at("bytes"), 4096);
    EXPECT_EQ(e.at("args").at("reduce_op"), "sum");
    EXPECT_FALSE(e.at("args").contains("error"));
    EXPECT_FALSE(e.at("args").contains("root"));
    // The algorithm that ran: one of all_reduce's, by size and topology (selection.h).
    const std::string algorithm = e.at("args").value("algorithm", "");
    EXPECT_TRUE(algorithm == "ring" || algorithm == "halving_doubling" ||
                algorithm == "recursive_doubling")
        << algorithm;
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    // Wall-clock microseconds: within a minute of now.
    const double now_us =
        static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
    EXPECT_NEAR(e.at("ts").get<double>(), now_us, 60e6);
    const int tid = e.at("tid");
    EXPECT_EQ(track_name(trace, rank, tid), "group default (" + backend + ")");

    auto bc = events(trace, {{"name", "broadcast"}, {"group", "default"}, {"seq", 1}});
    ASSERT_EQ(bc.size(), 1u);
    EXPECT_EQ(bc[0].at("args").at("root"), 1);
    EXPECT_EQ(bc[0].at("args").at("bytes"), 32);
    EXPECT_EQ(bc[0].at("args").at("dtype"), "i32");
    EXPECT_EQ(bc[0].at("tid"), tid);
    EXPECT_GE(bc[0].at("ts").get<double>(), e.at("ts").get<double>());

    auto gv = events(trace, {{"name", "all_gatherv"}, {"group", "default"}, {"seq", 2}});
    ASSERT_EQ(gv.size(), 1u);
    EXPECT_EQ(gv[0].at("args").at("bytes"), 5 * 8);  // the total, known on every rank

    auto rd = events(trace, {{"name", "reduce"}, {"group", "default"}, {"seq", 3}});
    ASSERT_EQ(rd.size(), 1u);
    EXPECT_EQ(rd[0].at("args").at("root"), 0);
    EXPECT_EQ(rd[0].at("args").at("reduce_op"), "max");
    EXPECT_EQ(rd[0].at("args").at("count"), 7);

    auto bar = events(trace, {{"name", "barrier"}, {"group", "default"}, {"seq", 4}});
    ASSERT_EQ(bar.size(), 1u);
    EXPECT_FALSE(bar[0].at("args").contains("bytes"));
    EXPECT_EQ(bar[0].at("args").at("algorithm"), "dissemination");

    auto sub = events(trace, {{"name", "all_reduce"}, {"group", "group/0"}, {"reduce_op", "min"}});
    ASSERT_EQ(sub.size(), 1u);
    EXPECT_EQ(sub[0].at("args").at("seq"), 0);
    EXPECT_EQ(sub[0].at("args").at("bytes"), 8);
    EXPECT_NE(sub[0].at("tid"), tid);
    EXPECT_EQ(track_name(trace, rank, sub[0].at("tid")), "group group/0 (" + backend + ")");
  }
}

// A later write goes where the file's closing brackets were: one complete file with both.
TEST(Trace, LaterWritesAppendAndFailedOperationsCarryTheirError) {
  trace_dir();
  ThreadWorld world(2, std::chrono::seconds(20));
  ASSERT_TRUE(world.ok());
  world.run([](int, ProcessGroup& pg) {
    int32_t v[3] = {1, 2, 3};
    pg.all_reduce(v, 3, DType::kI32)->wait();
  });
  diag::flush_trace();
  const size_t before = read_trace(0).at("traceEvents").size();
  // Rank 1 reduces 5 elements where rank 0 reduces 4: both get DesyncError.
  world.run([](int rank, ProcessGroup& pg) {
    int32_t v[5] = {};
    EXPECT_THROW(pg.all_reduce(v, rank == 0 ? 4 : 5, DType::kI32)->wait(), DesyncError);
  });
  diag::flush_trace();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json trace = read_trace(rank);
    if (rank == 0) {
      EXPECT_GT(trace.at("traceEvents").size(), before);
    }
    EXPECT_EQ(events(trace, {{"name", "all_reduce"}, {"dtype", "i32"}, {"count", 3}}).size(), 1u);
    auto failed =
        events(trace, {{"name", "all_reduce"}, {"dtype", "i32"}, {"count", rank == 0 ? 4 : 5}});
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_EQ(failed[0].at("args").at("seq"), 1);
    ASSERT_TRUE(failed[0].at("args").contains("error"));
    EXPECT_NE(failed[0].at("args").at("error").get<std::string>().find("all_reduce"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace tdist::pg_test
