// Distributed checkpoints with ranks as processes (torch_checkpoint_worker under tdistrun):
// saved by N ranks under fully_shard and loaded on M under fully_shard, replicated (DDP) or
// in a single process, N, M in {1, 2, 3, 4}, the parameters bit for bit, the rest of the
// epoch on the samplers exactly once, and the next step's parameters within 1e-5 (the
// optimizer state with them); a truncated file, or one rank unable to save, fails on every
// rank; a rank SIGKILLed while the
// job saves, rank 1 or rank 0, leaves the last complete checkpoint loadable. Every job is
// killed past its own limit (then the test fails, with the job's output).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "tdist/torch/checkpoint.h"
#include "torch_test_paths.h"

namespace tdist::torch::checkpoint_process_test {
namespace {

using test_support::run_command;
using test_support::TempDir;

const std::string kWorker = TDIST_TEST_BIN_DIR "/torch_checkpoint_worker";

std::string launch(int world, const std::string& args) {
  return "OMP_NUM_THREADS=1 timeout -s KILL 60 " + std::string(TDIST_TDISTRUN_BIN) +
         " --standalone --nproc-per-node " + std::to_string(world) + " " + kWorker + " " + args;
}

// The folders saved by N ranks, once per test program.
class CheckpointReshard : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {
 protected:
  static const std::string& saved_by(int n) {
    static std::map<int, std::unique_ptr<TempDir>> dirs;
    auto& dir = dirs[n];
    if (!dir) {
      dir = std::make_unique<TempDir>();
      std::string out;
      const int rc = run_command(launch(n, "auto fully_shard save " + dir->path()), &out);
      EXPECT_EQ(rc, 0) << "saving on " << n << " ranks failed:\n" << out;
    }
    return dir->path();
  }
};

TEST_P(CheckpointReshard, LoadsBitForBitAndTrainsOn) {
  const auto& [n, m, mode] = GetParam();
  const std::string dir = saved_by(n);
  const std::string args = "tcp " + mode + " load " + dir;
  const std::string command = mode == "single"
                                  ? "OMP_NUM_THREADS=1 timeout -s KILL 60 " + kWorker + " " + args
                                  : launch(m, args);
  std::string out;
  EXPECT_EQ(run_command(command, &out), 0) << command << "\n" << out;
}

std::string name(const ::testing::TestParamInfo<CheckpointReshard::ParamType>& info) {
  const auto& [n, m, mode] = info.param;
  return "Saved" + std::to_string(n) + "Load" + std::to_string(m) + "_" + mode;
}

INSTANTIATE_TEST_SUITE_P(FullyShard, CheckpointReshard,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values("fully_shard")),
                         name);
INSTANTIATE_TEST_SUITE_P(
    Replicated, CheckpointReshard,
    ::testing::Values(std::make_tuple(4, 2, "ddp"), std::make_tuple(3, 1, "ddp"),
                      std::make_tuple(1, 3, "ddp"), std::make_tuple(2, 4, "ddp"),
                      std::make_tuple(4, 1, "single"), std::make_tuple(3, 1, "single")),
    name);

// The line in which the worker of rank `r` reported its error ("" when none: a failure).
std::string error_of_rank(const std::string& out, int r) {
  const std::string prefix = "checkpoint_worker rank " + std::to_string(r) + ": ";
  const size_t at = out.find(prefix);
  if (at == std::string::npos) {
    ADD_FAILURE() << "rank " << r << " reported nothing:\n" << out;
    return "";
  }
  return out.substr(at, out.find('\n', at) - at);
}

// A file of a checkpoint saved on 2 ranks cut short: a load on 3 ranks fails on every rank,
// each naming the file, and no rank trains on.
TEST(CheckpointBadInput, ATruncatedFileFailsOnEveryRankNamingIt) {
  TempDir dir;
  std::string out;
  ASSERT_EQ(run_command(launch(2, "auto fully_shard save " + dir.path()), &out), 0) << out;
  const std::string file =
      dir.path() + "/step-00000003/shard-00002-model-00001-of-00001.safetensors";
  ASSERT_EQ(run_command("truncate -s -4 " + file, &out), 0) << out;
  EXPECT_NE(run_command(launch(3, "tcp fully_shard load " + dir.path()), &out), 0) << out;
  for (int r = 0; r < 3; ++r) {
    const std::string line = error_of_rank(out, r);
    EXPECT_NE(line.find(file + " is"), std::string::npos) << line;
    EXPECT_NE(line.find("truncated"), std::string::npos) << line;
  }
}

// One rank's save fails before it writes anything (a tensor the format cannot hold): the
// other rank raises too, naming it, within the job's limit instead of the save's timeout.
TEST(CheckpointBadInput, ARankThatCannotSaveFailsEveryRank) {
  TempDir dir;
  std::string out;
  EXPECT_NE(run_command(launch(2, "tcp fully_shard save_bad " + dir.path()), &out), 0) << out;
  for (int r = 0; r < 2; ++r) {
    const std::string line = error_of_rank(out, r);
    EXPECT_NE(line.find("'bad' has dtype ComplexFloat"), std::string::npos) << line;
    if (r == 0) {
      EXPECT_NE(line.find("rank 1"), std::string::npos) << line;
    }
  }
  EXPECT_FALSE(tdist::checkpoint::latest(dir.path()));
}

// Runs the worker's loop on 2 ranks, SIGKILLs `victim` while a save is under way (a
// temporary folder holds a rank's file, after at least one commit), then loads the latest
// complete checkpoint on 2 ranks and checks it against its reference.
void kill_while_saving(int victim) {
  TempDir dir;
  const std::string script = "D=" + dir.path() + "; " + launch(2, "shm fully_shard loop $D") +
                             " > $D/log 2>&1 & job=$!; "
                             "for i in $(seq 4000); do "
                             "  if ls $D/step-*/tdist.json >/dev/null 2>&1 && "
                             "     ls $D/step-*.tmp.*/shard-* >/dev/null 2>&1 && [ -f $D/pid-" +
                             std::to_string(victim) +
                             " ]; then break; fi; sleep 0.005; done; "
                             "kill -9 $(cat $D/pid-" +
                             std::to_string(victim) +
                             "); wait $job; echo job exit $?; cat $D/log | tail -5";
  std::string out;
  run_command("bash -c '" + script + "'", &out);
  EXPECT_NE(out.find("job exit"), std::string::npos) << out;
  EXPECT_EQ(out.find("job exit 0"), std::string::npos) << "the job survived the kill:\n" << out;
  std::string verify;
  EXPECT_EQ(run_command(launch(2, "tcp fully_shard verify " + dir.path()), &verify), 0)
      << verify << "\nthe killed job:\n"
      << out;
}

TEST(CheckpointKill, Rank1KilledMidSaveLeavesTheLastCheckpoint) { kill_while_saving(1); }
TEST(CheckpointKill, Rank0KilledMidSaveLeavesTheLastCheckpoint) { kill_while_saving(0); }

}  // namespace
}  // namespace tdist::torch::checkpoint_process_test
