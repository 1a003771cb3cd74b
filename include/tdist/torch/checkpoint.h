// Distributed checkpoints: every rank writes the shards it owns, in parallel, as files that
// PyTorch's torch.distributed.checkpoint loads with the reader it ships for the format
// (HuggingFaceStorageReader), and loads what PyTorch saved with HuggingFaceStorageWriter;
// a checkpoint saved by N ranks loads on any M, each rank reading only the byte ranges of
// the rows it needs. docs/checkpoint.md describes the format and the commit.
//
//   tdist::checkpoint::State state;
//   state.module(*model, "model").optimizer(optimizer, *model, "optim")
//        .sampler(sampler, "sampler").value("step", &step).rng("rng");
//   tdist::checkpoint::Checkpointer ckpt("/ckpt");       // default group; not collective
//   if (auto step0 = ckpt.resume(state)) first_step = *step0 + 1;   // collective
//   ...
//   if (step % 100 == 0) ckpt.async_save(step, state);   // collective; returns after staging
//   ...
//   ckpt.wait();                                          // the last save, committed
//
// State: named entries that refer to the job's live objects. Saving reads them, loading
// writes into them in place (tensors keep their storage, so optimizers and autograd see the
// loaded values). Every rank must build the same entries in any order (the names, global
// shapes and dtypes are compared when saving); a replicated tensor (a DDP model's parameter,
// a buffer) is written by one rank only, the ranks sharing the writing by size; a sharded
// one (fully_shard's, or any rows of a tensor split along dim 0) by every rank that holds
// rows of it, with its global shape and offsets.
//  - module(m, prefix): m's parameters and buffers as m->named_parameters() /
//    named_buffers() name them, as "prefix.name" (no prefix: "name", as a plain PyTorch
//    state_dict), replicated;
//  - module(handle, prefix): a fully_shard model (the outermost handle): its parameters as
//    shards of their global shapes, its buffers replicated;
//  - optimizer(opt, model or handle, prefix): per parameter "prefix.state.<param>.<key>", as
//    PyTorch's get_optimizer_state_dict names them (SGD momentum_buffer; Adam and AdamW
//    step, exp_avg, exp_avg_sq, max_exp_avg_sq; Adagrad step, sum; RMSprop step,
//    square_avg, momentum_buffer, grad_avg), sharded as the parameter is. State an
//    optimizer has not created yet (before its first step) is created by load. The
//    hyperparameters stay what the program sets (add a scheduler's step as a value);
//  - sampler(s, name): a DistributedSampler's epoch and the positions handed out this epoch
//    by every rank; after a load on any number of ranks the rest of the epoch is read with
//    every sample exactly once (sampler.h: resume), later epochs in PyTorch's order;
//  - rng(name): each rank's CPU generator state (torch's default generator); on load rank r
//    takes the state rank r saved, modulo the old world size;
//  - tensor(name, t) / shard(name, rows, global_shape, offset): any tensor, replicated, or
//    this rank's rows [offset, offset + rows.size(0)) of a tensor of global_shape;
//  - value(name, &v): an int64_t, double or std::string, the same on every rank (rank 0's
//    is saved; load sets it on every rank).
// Tensors may be on a CUDA device (copied through the host). module() and optimizer() take
// the parameters' tensors when called: build the State after the model is on its device
// and wrapped (fully_shard, DDP), and after the optimizer is made.
//
// Saving (collective over the checkpointer's group: every rank calls it, with the same
// step, in the same order as its other saves): the step's checkpoint is written to a
// temporary folder in `dir` (files written and fsync'd), and when every rank has reported,
// rank 0 writes the index, fsyncs it and renames the folder to `dir`/step-<step> (8 digits
// or more) and fsyncs `dir`: a checkpoint is either complete or absent. A rank killed while
// saving leaves the previous checkpoints intact and loadable. latest(dir) is the last
// complete one. Saving a step that exists replaces it atomically. keep_last > 0 removes the
// oldest complete ones beyond that count after a commit.
//  - async_save copies what this rank writes into its file's image in memory (on this
//    thread, blocking for the copy only; the image is kept between saves, so only the first
//    save faults its pages in) and a background thread writes it with direct I/O (O_DIRECT:
//    no page-cache copy competing with training) and commits; one save is in flight at
//    a time (a second waits for the first); wait() returns once it is committed on every
//    rank. A failed save (a full disk, another rank's error, a rank that never reported
//    within `timeout`) raises on every rank from wait() or the next async_save/save.
//    Collectives of the training may go on meanwhile: the commit goes through the group's
//    store, never through its collectives.
//  - save = async_save + wait, without the staging copy.
//
// Loading (collective): `path` is one checkpoint folder (tdist's, or one PyTorch's
// HuggingFaceStorageWriter wrote). Every entry of the state must be in it, with the same
// global shape and dtype; entries of the checkpoint the state does not name are ignored.
// Each rank first reads the files' headers and checks everything: a missing or truncated
// file, a tensor missing, of another shape or dtype, rows nobody saved. The ranks agree (one
// all_gather of errors), and only if no rank found a problem does any rank read its rows,
// straight into the state's tensors (only an I/O error of the disk can then fail: every rank
// raises, saying the state is partly loaded). An error names the checkpoint, the file and
// the tensor, and raises on every rank (tdist::InvalidArgument), before any value is
// overwritten. load returns the step the checkpoint was saved at (-1 for one
// PyTorch wrote, which has no step).
//
// Thread-safety: one thread at a time per Checkpointer; the background write touches only
// the staged copies, so the state's tensors may change as soon as async_save returns.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/torch/fully_shard.h"
#include "tdist/torch/sampler.h"

namespace tdist::checkpoint {

// One tensor entry of a State, as this rank holds it: rows [offset, offset + data.size(0))
// of a tensor of global_shape (replicated: the whole tensor, offset 0).
struct TensorEntry {
  std::string name;
  ::torch::Tensor data;  // live: load copies into it
  std::vector<int64_t> global_shape;
  int64_t offset = 0;
  bool replicated = true;
};

// The non-tensor values a checkpoint carries (in its index).
using Value = std::variant<int64_t, double, std::string>;

class State {
 public:
  State& module(const ::torch::nn::Module& m, const std::string& prefix = "");
  State& module(const tdist::torch::FullyShardedBase& handle, const ::torch::nn::Module& m,
                const std::string& prefix = "");
  State& optimizer(::torch::optim::Optimizer& opt, const ::torch::nn::Module& m,
                   const std::string& prefix = "optim");
  State& optimizer(::torch::optim::Optimizer& opt, const tdist::torch::FullyShardedBase& handle,
                   const std::string& prefix = "optim");
  State& sampler(tdist::torch::DistributedSampler& s, const std::string& name = "sampler");
  State& rng(const std::string& name = "rng");
  State& tensor(const std::string& name, const ::torch::Tensor& t);
  State& shard(const std::string& name, const ::torch::Tensor& rows,
               std::vector<int64_t> global_shape, int64_t offset);
  State& value(const std::string& name, int64_t* v);
  State& value(const std::string& name, double* v);
  State& value(const std::string& name, std::string* v);

  // What the entries hold now (the optimizer's and sampler's state read at this call), for
  // a group of `world` ranks where this one is `rank`. Used by the checkpointer.
  struct Snapshot {
    std::vector<TensorEntry> tensors;
    std::vector<std::pair<std::string, Value>> values;
  };
  Snapshot snapshot(int rank, int world) const;

  // Loading: each entry's targets (tensors to fill: live ones, or fresh ones where the
  // optimizer has no state yet), then, once every rank has read and checked everything,
  // apply() per entry (fresh tensors put in place, the sampler, the values).
  struct LoadTarget {
    std::vector<TensorEntry> tensors;
    std::vector<std::function<void()>> apply;
  };
  // What planning a load may ask of the checkpoint: whether it holds a tensor, a (small)
  // tensor whole (for entries whose shape depends on the old world size: the sampler's
  // masks, the generators' states), a value (null when absent).
  struct Saved {
    std::function<bool(const std::string&)> has;
    std::function<::torch::Tensor(const std::string&)> read;
    std::function<const Value*(const std::string&)> value;
  };
  LoadTarget load_target(int rank, int world, const Saved& saved) const;

  struct Entry;  // checkpoint_state.cc

 private:
  std::vector<std::shared_ptr<const Entry>> entries_;
};

struct CheckpointOptions {
  // The group whose ranks save and load together; default: the default group, or a single
  // process when none is initialized.
  std::shared_ptr<ProcessGroup> group;
  // Complete checkpoints to keep (the oldest removed after each commit); 0 keeps all.
  int keep_last = 0;
  // How long rank 0 waits for every rank's files, and the others for the commit.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class Checkpointer {
 public:
  explicit Checkpointer(std::string dir, CheckpointOptions options = {});
  ~Checkpointer();  // waits for the save in flight (its error is only logged)
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  void save(int64_t step, const State& state);
  void async_save(int64_t step, const State& state);
  void wait();
  // The last complete checkpoint of dir, loaded into `state` (collective); its step, or
  // nullopt (and `state` untouched) when dir holds none.
  std::optional<int64_t> resume(const State& state);
  // Seconds the training thread was held by the last async_save / save (staging).
  double last_blocking_seconds() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Collective: loads the checkpoint folder `path` into `state`; its step (-1: none recorded).
int64_t load(const std::string& path, const State& state,
             std::shared_ptr<ProcessGroup> group = nullptr);
// Not collective: the folder of dir's last complete checkpoint, if any.
std::optional<std::string> latest(const std::string& dir);
// Collective, one call: Checkpointer(dir).save(step, state) / resume(state).
void save(const std::string& dir, int64_t step, const State& state);
std::optional<int64_t> resume(const std::string& dir, const State& state);

}  // namespace tdist::checkpoint
