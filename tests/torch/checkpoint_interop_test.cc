// Checkpoints between tdist and PyTorch, both ways: PyTorch's DCP (HuggingFaceStorageReader)
// loads what tdist's fully_shard saved on 4 ranks, into a plain module and into FSDP2 on 3
// ranks; tdist loads what PyTorch's DCP (HuggingFaceStorageWriter) saved from FSDP2 on 2
// ranks and from a plain module, under fully_shard on 3 ranks, DDP on 2 and a single
// process; every parameter bit for bit (checkpoint_interop.py, torch_checkpoint_worker).
// Skipped where python3 has no torch >= 2.4 with DCP's HuggingFace storage and safetensors,
// and in trees built with LibTorch 1.x.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <string>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "torch_test_paths.h"

namespace tdist::torch::checkpoint_interop_test {
namespace {

using test_support::run_command;
using test_support::TempDir;

const std::string kWorker = TDIST_TEST_BIN_DIR "/torch_checkpoint_worker";
const std::string kScript = TDIST_TEST_SOURCE_DIR "/checkpoint_interop.py";

std::string limited(const std::string& command) {
  return "OMP_NUM_THREADS=1 timeout -s KILL 120 " + command;
}

std::string launch(int world, const std::string& args) {
  return limited(std::string(TDIST_TDISTRUN_BIN) + " --standalone --nproc-per-node " +
                 std::to_string(world) + " " + kWorker + " " + args);
}

// Runs PyTorch's side; true to go on, false (with the test skipped) without what it needs.
bool python(const std::string& args) {
  std::string out;
  const int rc = run_command(limited("python3 " + kScript + " " + args), &out);
  if (rc == 77 || rc == 127) {
    ADD_FAILURE() << "python3 lacks PyTorch's DCP HuggingFace storage or safetensors: " << out;
    return false;
  }
  EXPECT_EQ(rc, 0) << args << "\n" << out;
  return rc == 0;
}

// In the LibTorch 2.x tree only (CI's Python has torch 2.x): the format is the same for
// LibTorch 1.13, whose tree runs the rest.
bool python_available() {
  if (TORCH_VERSION_MAJOR < 2) return false;
  std::string out;
  const int rc = run_command(
      "python3 -c 'import safetensors; "
      "from torch.distributed.checkpoint import HuggingFaceStorageReader; "
      "from torch.distributed.fsdp import fully_shard'",
      &out);
  return rc == 0;
}

TEST(CheckpointInterop, PyTorchLoadsWhatFullyShardSaved) {
  if (!python_available()) GTEST_SKIP() << "python3 lacks torch >= 2.4's DCP or safetensors";
  TempDir dir;
  std::string out;
  ASSERT_EQ(run_command(launch(4, "auto fully_shard save " + dir.path()), &out), 0) << out;
  const std::string ckpt = dir.path() + "/step-00000003 " + dir.path() + "/ref-3.txt";
  python("load " + ckpt + " 1 plain");
  python("load " + ckpt + " 3 fsdp2");
}

TEST(CheckpointInterop, TdistLoadsWhatFsdp2Saved) {
  if (!python_available()) GTEST_SKIP() << "python3 lacks torch >= 2.4's DCP or safetensors";
  TempDir dir;
  if (!python("save " + dir.path() + " 2 fsdp2")) return;
  std::string out;
  EXPECT_EQ(run_command(launch(3, "tcp fully_shard load_model " + dir.path()), &out), 0) << out;
  EXPECT_EQ(run_command(limited(kWorker + " tcp single load_model " + dir.path()), &out), 0) << out;
}

TEST(CheckpointInterop, TdistLoadsWhatAPlainModuleSaved) {
  if (!python_available()) GTEST_SKIP() << "python3 lacks torch >= 2.4's DCP or safetensors";
  TempDir dir;
  if (!python("save " + dir.path() + " 1 plain")) return;
  std::string out;
  EXPECT_EQ(run_command(launch(2, "shm ddp load_model " + dir.path()), &out), 0) << out;
}

}  // namespace
}  // namespace tdist::torch::checkpoint_interop_test
