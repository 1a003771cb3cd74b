// The parity yardstick of issue 32: the same model, data and initial parameters trained 20
// steps (SGD with momentum) with tdist::torch::fully_shard (and with tdist's DDP) in C++,
// under tdistrun (torch_sharded_parity_worker), and with PyTorch's FSDP2 over gloo
// (fsdp2_parity.py, run by the `python3` on PATH). Rank 0's losses and the final full
// parameters must match: bit for bit for fully_shard, f32 and bf16 parameters with f32
// reduction (FSDP2 reduce-scatters with ReduceOp.AVG, which comes out the same as tdist's
// reduce-scatter and average here), within 1e-6 relative for DDP (it all-reduces buckets;
// measured: identical at world 2; at world 3 the losses 7.6e-8 and the parameters 2.5e-7
// apart). Skipped where python3 has no FSDP2 (torch < 2.4).
//
// The Python runs, one per world size and dtype, are made once for the suite, in one
// python3 process (torch is imported once), before the first test.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "torch_test_paths.h"

namespace tdist::torch::sharded_parity_test {
namespace {

using test_support::run_command;
using test_support::TempDir;

// Every command's environment and limit: one thread per rank, killed after `seconds`.
std::string limited(int seconds, const std::string& command) {
  return "OMP_NUM_THREADS=1 timeout -k 5 " + std::to_string(seconds) + " " + command;
}

// What a run wrote (see sharded_parity_worker.cc): rank 0's losses and the parameters.
struct Result {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> params;
};

float from_hex(const std::string& word) {
  const auto bits = static_cast<uint32_t>(std::stoul(word, nullptr, 16));
  float v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

bool parse(const std::string& path, Result* result) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, name, word;
    words >> kind;
    if (kind == "loss" && (words >> word)) {
      result->losses.push_back(from_hex(word));
    } else if (kind == "param" && (words >> name)) {
      auto& values = result->params[name];
      while (words >> word) values.push_back(from_hex(word));
    } else {
      return false;
    }
  }
  return !result->losses.empty() && !result->params.empty();
}

// How far `a` is from the reference `b`: the largest relative loss difference, the largest
// parameter difference relative to its tensor's largest magnitude, and whether every bit
// matches.
struct Diff {
  double loss_rel = 0;
  double param_rel = 0;
  bool identical = true;
};

Diff compare(const Result& a, const Result& b) {
  Diff d;
  EXPECT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i) {
    if (std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)) != 0) d.identical = false;
    d.loss_rel = std::max(d.loss_rel, std::abs(double{a.losses[i]} - b.losses[i]) /
                                          std::max(std::abs(double{b.losses[i]}), 1e-30));
  }
  EXPECT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, ref] : b.params) {
    auto it = a.params.find(name);
    if (it == a.params.end() || it->second.size() != ref.size()) {
      ADD_FAILURE() << "parameter " << name << " missing or of another size";
      d.identical = false;
      continue;
    }
    double largest = 1e-30, worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::memcmp(&it->second[i], &ref[i], sizeof(float)) != 0) d.identical = false;
      largest = std::max(largest, std::abs(double{ref[i]}));
      worst = std::max(worst, std::abs(double{it->second[i]} - ref[i]));
    }
    d.param_rel = std::max(d.param_rel, worst / largest);
  }
  return d;
}

class ShardedParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = std::make_unique<TempDir>("sharded_parity"); }
  static void TearDownTestSuite() { dir_.reset(); }

  // The first test runs fsdp2_parity.py for every spec the suite compares with, in one
  // python3 process; it exits 77 where python3 has no torch with FSDP2 or its torch is not
  // the LibTorch version this build uses (other kernels round differently), 127 where there
  // is no python3.
  void SetUp() override {
    if (python_rc_ == kNotRun) {
      const std::string version =
          std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
      python_rc_ =
          run_command(limited(120, "python3 " + std::string(TDIST_TEST_SOURCE_DIR) +
                                       "/fsdp2_parity.py --require-torch " + version + " " +
                                       dir_->path() + " 2-f32-sgd 3-f32-sgd 2-bf16-sgd 3-bf16-sgd"),
                      &python_out_);
    }
    if (python_rc_ == 77 || python_rc_ == 127) {
      GTEST_SKIP() << "needs a python3 with PyTorch's FSDP2 (torch >= 2.4) of this build's "
                      "LibTorch version for the PyTorch side of the parity check: "
                   << python_out_;
    }
    ASSERT_EQ(python_rc_, 0) << "fsdp2_parity.py failed:\n" << python_out_;
  }

  // FSDP2 over gloo's result for `spec` (WORLD-DTYPE-sgd).
  static const Result& fsdp2(const std::string& spec) {
    auto [it, added] = python_.try_emplace(spec);
    if (added) {
      EXPECT_TRUE(parse(dir_->file(spec + ".txt"), &it->second)) << "no FSDP2 result " << spec;
    }
    return it->second;
  }

  // tdist's run of the worker (mode fully_shard or ddp) with `world` ranks over `backend`.
  static Result tdist_run(const std::string& mode, const std::string& dtype, int world,
                          const std::string& backend) {
    const std::string file =
        dir_->file(mode + "-" + dtype + "-" + std::to_string(world) + "-" + backend + ".txt");
    std::string out;
    const int rc =
        run_command(limited(60, std::string(TDIST_TDISTRUN_BIN) +
                                    " --standalone --nproc-per-node " + std::to_string(world) +
                                    " " + TDIST_TEST_BIN_DIR + "/torch_sharded_parity_worker " +
                                    backend + " " + mode + " " + dtype + " sgd " + file),
                    &out);
    Result result;
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(parse(file, &result)) << "no result from the worker:\n" << out;
    return result;
  }

  // fully_shard against FSDP2: every bit the same.
  static void expect_identical(const std::string& dtype, int world, const std::string& backend) {
    const Result& ref = fsdp2(std::to_string(world) + "-" + dtype + "-sgd");
    const Diff d = compare(tdist_run("fully_shard", dtype, world, backend), ref);
    EXPECT_TRUE(d.identical) << "loss rel " << d.loss_rel << ", param rel " << d.param_rel;
  }

  // DDP against FSDP2 (f32): within 1e-6 relative (measured: identical at world 2; at world 3
  // the losses 7.6e-8, the parameters 2.5e-7 apart).
  static void expect_close(int world) {
    const Diff d =
        compare(tdist_run("ddp", "f32", world, "shm"), fsdp2(std::to_string(world) + "-f32-sgd"));
    EXPECT_LE(d.loss_rel, 1e-6);
    EXPECT_LE(d.param_rel, 1e-6);
  }

  static constexpr int kNotRun = -2;
  static int python_rc_;
  static std::string python_out_;
  static std::unique_ptr<TempDir> dir_;
  static std::map<std::string, Result> python_;
};

int ShardedParityTest::python_rc_ = kNotRun;
std::string ShardedParityTest::python_out_;
std::unique_ptr<TempDir> ShardedParityTest::dir_;
std::map<std::string, Result> ShardedParityTest::python_;

TEST_F(ShardedParityTest, FullyShardF32World2Tcp) { expect_identical("f32", 2, "tcp"); }
TEST_F(ShardedParityTest, FullyShardF32World2Shm) { expect_identical("f32", 2, "shm"); }
TEST_F(ShardedParityTest, FullyShardF32World2Auto) { expect_identical("f32", 2, "auto"); }
TEST_F(ShardedParityTest, FullyShardF32World3Tcp) { expect_identical("f32", 3, "tcp"); }
TEST_F(ShardedParityTest, FullyShardF32World3Shm) { expect_identical("f32", 3, "shm"); }
TEST_F(ShardedParityTest, FullyShardF32World3Auto) { expect_identical("f32", 3, "auto"); }
TEST_F(ShardedParityTest, FullyShardBf16World2Tcp) { expect_identical("bf16", 2, "tcp"); }
TEST_F(ShardedParityTest, FullyShardBf16World2Shm) { expect_identical("bf16", 2, "shm"); }
TEST_F(ShardedParityTest, FullyShardBf16World3Auto) { expect_identical("bf16", 3, "auto"); }

TEST_F(ShardedParityTest, DdpF32World2Shm) { expect_close(2); }
TEST_F(ShardedParityTest, DdpF32World3Shm) { expect_close(3); }

}  // namespace
}  // namespace tdist::torch::sharded_parity_test
