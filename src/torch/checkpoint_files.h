// A checkpoint's folder (internal; docs/checkpoint.md): its name, its files, its index, and
// the filesystem steps of a commit.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tdist/torch/checkpoint.h"

namespace tdist::checkpoint::files {

inline constexpr const char* kIndex = "tdist.json";  // written last, by rank 0
inline constexpr const char* kFormat = "tdist-checkpoint";
inline constexpr int kVersion = 1;

// "step-00000042" (8 digits or more).
std::string step_name(int64_t step);
// The step of a complete checkpoint's folder name, or nullopt (temporary folders, others).
std::optional<int64_t> step_of(const std::string& name);
// Rank r's file: PyTorch's name for shard r + 1 of a one-file-per-rank save.
std::string rank_file(int rank);

// The complete checkpoints of dir (folders named step-N holding an index), by step.
std::map<int64_t, std::string> complete(const std::string& dir);

// The index rank 0 writes: what the checkpoint holds.
struct Index {
  int64_t step = -1;
  int world = 0;
  std::map<std::string, uint64_t> files;  // name -> bytes
  struct Tensor {
    std::string dtype;  // safetensors' name
    std::vector<int64_t> shape;
    bool replicated = true;
  };
  std::map<std::string, Tensor> tensors;
  std::vector<std::pair<std::string, Value>> values;
};
std::string to_json(const Index& index);
// InvalidArgument naming `path` when the text is not a tdist index.
Index parse_index(const std::string& text, const std::string& path);

// Filesystem steps, each raising Error with errno's text and the path.
void make_dirs(const std::string& dir);
void fsync_path(const std::string& path);  // a file or a folder
void write_synced(const std::string& path, const std::string& data);
std::string read_text(const std::string& path);
void remove_tree(const std::string& path);  // no error when absent
// Renames `from` to `to`, atomically replacing a `to` that exists (the replaced folder is
// removed after), then fsyncs the parent folder.
void commit_rename(const std::string& from, const std::string& to);
std::vector<std::string> list_dir(const std::string& dir);
bool exists(const std::string& path);

}  // namespace tdist::checkpoint::files
