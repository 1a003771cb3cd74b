// tdistrun and the timeline (TDIST_TRACE): after the workers ended, whether they succeeded
// or failed, the launcher merges their per-rank files into DIR/tdist_trace.json (complete
// JSON, every rank's events, pid = global rank) and says where; stale rank files of an
// earlier job are not merged.
#include <nlohmann/json.hpp>

#include "launcher/tdistrun_test_util.h"

namespace tdist::tdistrun_test {
namespace {

using nlohmann::json;

const std::string kTraceWorker = kBinDir + "/launcher_trace_worker";

class TdistrunTraceTest : public TdistrunTest {
 protected:
  // The merged timeline's all_reduce events per pid.
  std::map<int, int> all_reduces(const fs::path& dir) {
    std::ifstream in(dir / "tdist_trace.json");
    EXPECT_TRUE(in.good());
    const json trace = json::parse(in);  // throws (fails the test) unless complete JSON
    std::map<int, int> out;
    for (const json& e : trace.at("traceEvents")) {
      if (e.at("ph") == "X" && e.at("name") == "all_reduce") {
        EXPECT_EQ(e.at("args").at("bytes"), 1024);
        ++out[e.at("pid").get<int>()];
      }
    }
    EXPECT_TRUE(trace.at("otherData").at("ranks").contains("0"));
    return out;
  }
};

TEST_F(TdistrunTraceTest, MergesEveryRanksTimeline) {
  const fs::path dir = dir_ / "trace";
  fs::create_directories(dir);
  std::ofstream(dir / "tdist_trace_rank7.json") << "{\"traceEvents\":[{\"ph\":\"X\"}]}";  // stale
  const Result r = run({"--nproc-per-node", "2", kTraceWorker}, {"TDIST_TRACE=" + dir.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      r.err.find("tdistrun: timeline of 2 ranks written to " + (dir / "tdist_trace.json").string()),
      std::string::npos)
      << r.err;
  EXPECT_EQ(all_reduces(dir), (std::map<int, int>{{0, 3}, {1, 3}}));
  EXPECT_TRUE(fs::exists(dir / "tdist_trace_rank0.json"));
  EXPECT_TRUE(fs::exists(dir / "tdist_trace_rank1.json"));
}

// Rank 1 fails once rank 0 wrote its file (when its group was destroyed); tdistrun then
// stops rank 0 and merges both.
TEST_F(TdistrunTraceTest, MergesAfterAFailedJobToo) {
  const fs::path dir = dir_ / "trace";
  const Result r =
      run({"--nproc-per-node", "2", kTraceWorker, "1", "3"}, {"TDIST_TRACE=" + dir.string()});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("timeline of 2 ranks written to"), std::string::npos) << r.err;
  EXPECT_EQ(all_reduces(dir), (std::map<int, int>{{0, 3}, {1, 3}}));
}

TEST_F(TdistrunTraceTest, NothingWithoutTdistTrace) {
  const Result r = run({"--nproc-per-node", "2", kTraceWorker});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("timeline"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tdist::tdistrun_test
