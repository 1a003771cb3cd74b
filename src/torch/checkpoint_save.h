// Checkpointer's state (internal): the group, the save in flight, the staging buffers.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint_files.h"
#include "safetensors.h"
#include "tdist/torch/checkpoint.h"

namespace tdist::checkpoint {

struct Checkpointer::Impl {
  // One save: what this rank writes, and what rank 0 puts in the index.
  struct Job {
    int64_t step = 0;
    std::string keys;  // store prefix of this save; empty for a single process
    std::string signature;
    std::vector<safetensors::WriteItem> items;
    std::map<std::string, files::Index::Tensor> tensors;
    std::vector<std::pair<std::string, Value>> values;
  };

  Impl(std::string dir, CheckpointOptions options);
  // Waits for the save in flight; rethrows its error.
  void wait();
  // Snapshots `state`, copies what this rank writes into the staging buffers when `stage`
  // (then writes in the background), else writes and commits at once.
  void start(int64_t step, const State& state, bool stage);
  void run(const Job& job);
  void prune(const std::string& committed);

  std::string dir;
  CheckpointOptions options;
  std::shared_ptr<ProcessGroup> group;  // null: a single process
  int rank = 0, world = 1;
  std::thread writer;
  std::exception_ptr failed;  // the writer's; read after joining it
  std::vector<::torch::Tensor> staging;
  double blocking = 0;
};

}  // namespace tdist::checkpoint
