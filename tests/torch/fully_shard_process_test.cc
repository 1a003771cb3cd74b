// fully_shard's bad input with ranks as processes: torch_fully_shard_worker runs the
// scenarios of fully_shard_scenarios.h under tdistrun --standalone (a free port) at world 2
// and 3 over tcp, shm and auto; every rank must report the error the scenario expects.
// Nothing may hang: the workers' groups time out after 10 s, and each job is killed past
// 90 s (then the test fails, naming what was missing).
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "support/run_command.h"
#include "torch/fully_shard_scenarios.h"
#include "torch_test_paths.h"

namespace tdist::torch::fully_shard_process_test {
namespace {

const char* const kDesync = "different_wrap,wrap_order,forward_order,different_shapes,skipped_unit";
const char* const kMisuse = "param_replaced,optimizer_unsharded,grads_before_wrap";

// (world, backend, scenarios)
class FullyShardProcessTest
    : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(FullyShardProcessTest, EveryRankReportsTheExpectedError) {
  const auto& [world, backend, scenarios] = GetParam();
  const std::string command =
      "OMP_NUM_THREADS=1 timeout -s KILL 90 " + std::string(TDIST_TDISTRUN_BIN) +
      " --standalone --nproc-per-node " + std::to_string(world) +
      " " TDIST_TEST_BIN_DIR "/torch_fully_shard_worker " + scenarios + " " + backend;
  std::string out;
  const int code = test_support::run_command(command, &out);
  EXPECT_EQ(code, 0) << command << "\n" << out;
  // "RESULT <scenario> rank <r> <Type>: <message>", anywhere in a line (tdistrun may prefix).
  std::map<std::pair<std::string, int>, std::pair<std::string, std::string>> results;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("RESULT ");
    if (at == std::string::npos) continue;
    std::istringstream in(line.substr(at + 7));
    std::string name, word, type;
    int rank = -1;
    in >> name >> word >> rank >> type;
    if (!type.empty() && type.back() == ':') type.pop_back();
    std::string message;
    std::getline(in, message);
    results[{name, rank}] = {type, message.empty() ? message : message.substr(1)};
  }
  std::istringstream names(scenarios);
  for (std::string name; std::getline(names, name, ',');) {
    for (int r = 0; r < world; ++r) {
      auto it = results.find({name, r});
      if (it == results.end()) {
        ADD_FAILURE() << name << ": no result from rank " << r << "\n" << out;
        continue;
      }
      EXPECT_EQ(fully_shard_scenarios::check(name, r, it->second.first, it->second.second), "")
          << name << ", rank " << r << " of " << world << " over " << backend;
    }
  }
}

std::string param_name(
    const ::testing::TestParamInfo<std::tuple<int, std::string, std::string>>& info) {
  const auto& [world, backend, scenarios] = info.param;
  return "World" + std::to_string(world) + "_" + backend + "_" +
         (scenarios == kDesync ? "Desync" : "Misuse");
}

INSTANTIATE_TEST_SUITE_P(Scenarios, FullyShardProcessTest,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values("tcp", "shm", "auto"),
                                            ::testing::Values(kDesync, kMisuse)),
                         param_name);

}  // namespace
}  // namespace tdist::torch::fully_shard_process_test
