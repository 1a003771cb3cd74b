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
  // A file's image in memory: aligned for O_DIRECT, on huge pages where the kernel allows;
  // kept between saves.
  struct Image {
    explicit Image(size_t capacity);
    ~Image();
    Image(const Image&) = delete;
    Image& operator=(const Image&) = delete;
    char* data = nullptr;
    size_t capacity = 0;
  };

  // One save: what this rank writes, and what rank 0 puts in the index.
  struct Job {
    int64_t step = 0;
    std::string keys;  // store prefix of this save; empty for a single process
    std::string signature;
    std::vector<safetensors::WriteItem> items;  // a save without staging: written from these
    std::shared_ptr<Image> image;               // a staged save: the file's bytes
    uint64_t image_size = 0;
    std::map<std::string, files::Index::Tensor> tensors;
    std::vector<std::pair<std::string, Value>> values;
  };

  Impl(std::string dir, CheckpointOptions options);
  // Waits for the save in flight; rethrows its error.
  void wait();
  // Snapshots `state`; with `stage`, copies what this rank writes into its file's image
  // (then writes it in the background), else writes and commits at once.
  void start(int64_t step, const State& state, bool stage);
  void prepare(Job& job, const State& state, bool stage);
  void abandon(const Job& job, const std::string& error) noexcept;
  void run(const Job& job);
  void prune(const std::string& committed);

  std::string dir;
  CheckpointOptions options;
  std::shared_ptr<ProcessGroup> group;  // null: a single process
  int rank = 0, world = 1;
  std::thread writer;
  std::exception_ptr failed;  // the writer's; read after joining it
  std::shared_ptr<Image> image;
  double blocking = 0;
};

}  // namespace tdist::checkpoint
