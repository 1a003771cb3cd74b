// DDP on the timeline (TDIST_TRACE, diag/trace.h), ranks as threads over the tcp
// backend: on the track "DDP buckets" of each rank, every bucket of every synchronized
// pass has a "ready" instant event and one complete event from its launch to the end of
// its Work, with its index, bytes and number of parameters, whether buckets launch during
// backward or after it; the collectives are on the group's track.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "diag/trace.h"
#include "pg/pg_test_util.h"
#include "tdist/torch/ddp.h"

namespace tdist::torch::ddp_trace_test {
namespace {

using nlohmann::json;
using pg_test::ThreadWorld;

constexpr int kSteps = 2;
constexpr size_t kParamBytes = (8 * 16 + 16 + 16 * 4 + 4) * sizeof(float);

struct Net : ::torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", ::torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", ::torch::nn::Linear(16, 4));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return fc2(::torch::relu(fc1(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

double now_us() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
}

// kSteps steps of Net on 2 ranks (threads), in two or more buckets.
void train(CommOverlap overlap) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  world.run([&](int r, ProcessGroup&) {
    ::torch::manual_seed(1);
    auto model = std::make_shared<Net>();
    DDPOptions options;
    options.process_group = world.shared(r);
    options.overlap = overlap;
    options.first_bucket_mb = 1e-4;  // ~100 bytes
    options.bucket_cap_mb = 2e-4;
    DistributedDataParallel<std::shared_ptr<Net>> ddp(model, options);
    ::torch::optim::SGD opt(model->parameters(), 0.1);
    for (int step = 0; step < kSteps; ++step) {
      opt.zero_grad();
      ddp.forward(::torch::randn({4, 8})).sum().backward();
      opt.step();
    }
  });
}

// The DDP events of `rank` between `from` and `to` (wall-clock microseconds).
void check_rank(const std::string& dir, int rank, double from, double to) {
  std::ifstream in(dir + "/tdist_trace_rank" + std::to_string(rank) + ".json");
  ASSERT_TRUE(in.good());
  const json trace = json::parse(in);  // throws (fails the test) unless complete JSON
  int ddp_tid = -1;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" &&
        e.at("args").at("name") == "DDP buckets") {
      ddp_tid = e.at("tid");
    }
  }
  ASSERT_GE(ddp_tid, 0);
  std::map<std::pair<int, int>, double> ready;  // (pass, bucket) -> when
  std::map<std::pair<int, int>, json> launched;
  std::map<int, size_t> bytes_per_pass;
  int collectives = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    const double ts = e.at("ts");
    if (ts < from || ts > to) continue;
    if (e.at("cat") == "collective") ++collectives;
    if (e.at("cat") != "ddp") continue;
    EXPECT_EQ(e.at("pid"), rank);
    EXPECT_EQ(e.at("tid"), ddp_tid);
    const json& args = e.at("args");
    const std::pair<int, int> key{args.at("pass"), args.at("bucket")};
    EXPECT_GE(args.at("params").get<int>(), 1);
    EXPECT_GT(args.at("bytes").get<size_t>(), 0u);
    if (e.at("ph") == "i") {
      EXPECT_EQ(e.at("name"), "bucket " + std::to_string(key.second) + " ready");
      EXPECT_TRUE(ready.emplace(key, ts).second);
    } else {
      ASSERT_EQ(e.at("ph"), "X");
      EXPECT_EQ(e.at("name"), "bucket " + std::to_string(key.second));
      bytes_per_pass[key.first] += args.at("bytes").get<size_t>();
      EXPECT_TRUE(launched.emplace(key, e).second);
    }
  }
  EXPECT_EQ(ready.size(), launched.size());
  EXPECT_GE(launched.size(), 2u * kSteps);  // two buckets or more per pass
  for (const auto& [key, e] : launched) {
    ASSERT_TRUE(ready.count(key)) << "pass " << key.first << ", bucket " << key.second;
    EXPECT_GE(e.at("ts").get<double>() + 1e-3, ready[key]);  // launched once ready
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
  for (int pass = 1; pass <= kSteps; ++pass) EXPECT_EQ(bytes_per_pass[pass], kParamBytes);
  // Each pass: the control vector and one all_reduce per bucket.
  EXPECT_GE(collectives, kSteps * 3);
}

// TDIST_TRACE is read once per process: set before anything, one folder for both ways of
// launching, each way's events told apart by time.
TEST(DdpTrace, EveryBucketIsReadyThenLaunchedUntilItsWorkEnds) {
  char name[] = "/tmp/tdist_ddp_trace_XXXXXX";
  const std::string dir = ::mkdtemp(name);
  ::setenv("TDIST_TRACE", dir.c_str(), 1);
  ASSERT_TRUE(diag::trace_enabled());
  ::torch::set_num_threads(1);
  const CommOverlap modes[] = {CommOverlap::kDuringBackward, CommOverlap::kAfterBackward};
  std::vector<double> times = {now_us()};
  for (CommOverlap mode : modes) {
    train(mode);
    times.push_back(now_us());
  }
  diag::flush_trace();
  for (size_t m = 0; m < 2; ++m) {
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE((m == 0 ? "during backward, rank " : "after backward, rank ") +
                   std::to_string(rank));
      check_rank(dir, rank, times[m], times[m + 1]);
    }
  }
  ::unsetenv("TDIST_TRACE");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tdist::torch::ddp_trace_test
