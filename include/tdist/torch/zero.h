// ZeroRedundancyOptimizer (ZeRO stage 1) for LibTorch: the optimizer state partitioned
// over the ranks of a process group, as torch.distributed.optim.ZeroRedundancyOptimizer.
// Each rank keeps a local torch::optim optimizer (made by the caller's factory) over its
// share of the parameters only, so Adam's two moments take about 1/world of their usual
// memory; after each rank stepped its share, the updated values reach every rank.
//
//   tdist::torch::DistributedDataParallel ddp(net);
//   tdist::torch::ZeroRedundancyOptimizer zero(
//       ddp.module()->parameters(),
//       [](std::vector<torch::Tensor> p) {
//         return std::make_unique<torch::optim::Adam>(std::move(p),
//         torch::optim::AdamOptions(1e-3));
//       });
//   for (auto& batch : *loader) {
//     zero.zero_grad();
//     loss_fn(ddp.forward(batch.data), batch.target).backward();  // averaged gradients
//     zero.step();                                                 // every rank's parameters
//     updated
//   }
//
// Partition: torch's. The parameters, largest (numel) first, ties in the order given, each
// go whole to the rank with the smallest total so far (the lowest such rank): the same
// answer on every rank. rank_of() says who owns a parameter.
//
// The local optimizer: factory(parameters this rank owns, in partition order), which must
// return an optimizer of exactly those parameters in one parameter group (any
// torch::optim optimizer: SGD, Adam, AdamW, Adagrad, RMSprop, ...). A rank that owns no
// parameter (more ranks than parameters) gets factory({}). Change its options (the
// learning rate, a scheduler) through optimizer() on every rank.
//
// step(): the local optimizer's step (which reads the gradients of this rank's
// parameters, e.g. those DDP averaged), then every owner's new values reach every rank:
// by default one broadcast per owned parameter, or per owner's block of the flat buffer
// with parameters_as_bucket_view; or one all_gather of the ranks' blocks padded to equal
// size (ZeroOptions::param_sync). With parameters_as_bucket_view each parameter's data
// becomes a view of one flat buffer holding every rank's parameters (set_data: the
// Tensor objects stay, so DDP and the module keep working), which the all_gather fills in
// place; without it the all_gather packs and unpacks a staging buffer.
//
// Construction is collective (every rank, same order as the group's other collectives):
// bad input is InvalidArgument raised on EVERY rank, naming the rank that had it: an
// empty parameter list, parameters of mixed dtypes or devices, sparse or non-leaf
// parameters, a parameter given twice, ranks whose lists differ in shapes or dtypes, a
// factory that throws, returns null or an optimizer of other parameters.
//
// Checkpoints: consolidate_state_dict(to) (collective) gathers the ranks' states on rank
// `to`, where state_dict() is then one optimizer of the factory's type over every
// parameter (in the order given) holding the full state: what a plain, unsharded
// optimizer would hold, so `torch::save(zero.state_dict(), path)` writes a file that
// torch::load reads into that plain optimizer, or into load_state_dict() of any
// ZeroRedundancyOptimizer over the same parameters (any world size).
//
// Thread-safety: none; one thread at a time, as torch::optim optimizers. Communication
// failures (PeerError, TimeoutError, DesyncError) propagate from the collective calls.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tdist/process_group.h"

namespace tdist::torch {

// Makes the local optimizer over the given parameters (see the file comment).
using OptimizerFactory = std::function<std::unique_ptr<::torch::optim::Optimizer>(
    std::vector<::torch::Tensor> parameters)>;

// How step() hands the updated parameters to every rank.
enum class ParamSync {
  // kBroadcast: measured faster with and without parameters_as_bucket_view (world 2, 50M
  // f32 parameters over shm: 0.22 vs 0.50 s per sync with the flat buffer, 0.36 vs 1.6 s
  // without, where all_gather packs and unpacks a staging buffer as large as the model).
  kAuto,
  // Each owner broadcasts its parameters: one broadcast per parameter, or per rank with
  // parameters_as_bucket_view (torch's way).
  kBroadcast,
  // One all_gather of every rank's parameters as a flat buffer, padded to the largest
  // rank's size.
  kAllGather,
};

struct ZeroOptions {
  std::shared_ptr<ProcessGroup> process_group;  // nullptr: tdist::get_default_group()
  // Parameters become views of one flat buffer (torch's option of that name).
  bool parameters_as_bucket_view = false;
  ParamSync param_sync = ParamSync::kAuto;
};

class ZeroRedundancyOptimizer {
 public:
  // Collective (see the file comment). Keeps references to `parameters`.
  ZeroRedundancyOptimizer(std::vector<::torch::Tensor> parameters, OptimizerFactory factory,
                          ZeroOptions options = {});
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Clears the gradients of every parameter (not only this rank's): reset to undefined
  // with set_to_none, else zeroed in place.
  void zero_grad(bool set_to_none = true);

  // The local optimizer's step(closure), then the parameter sync; collective. Returns
  // what the local step returned. A closure runs as the local optimizer runs it (once
  // for SGD and Adam, on every rank alike); one that runs collectives (DDP's backward)
  // needs an optimizer that calls it the same number of times on every rank.
  ::torch::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);

  // The rank that owns (steps) parameters()[index] / `parameter`; InvalidArgument for an
  // index out of range or a tensor that is not one of the parameters.
  int rank_of(size_t index) const;
  int rank_of(const ::torch::Tensor& parameter) const;
  // Indices into parameters() owned by each rank, in partition order.
  const std::vector<std::vector<size_t>>& partition() const { return partition_; }

  // Bytes of the optimizer-state tensors this rank holds (its local optimizer's state;
  // 0 before the first step). Counts the tensors of SGD, Adam, AdamW, Adagrad and
  // RMSprop states directly; other optimizers' states by their serialized size.
  int64_t state_bytes() const;

  // Collective: every rank's optimizer state reaches rank `to`, which keeps it until the
  // next call (other ranks drop theirs). InvalidArgument for `to` out of range.
  void consolidate_state_dict(int to = 0);
  // On the rank of the last consolidate_state_dict: the full optimizer (see the file
  // comment; save it with torch::save). Error on other ranks and before any.
  const ::torch::optim::Optimizer& state_dict() const;
  // Loads this rank's share of `full`'s state, and its first group's options: `full` is
  // a state_dict(), or any optimizer of the factory's type with one group over tensors of
  // the parameters' shapes, in the same order. Not collective: every rank calls it with
  // the same state. The state tensors are shared with `full` (as torch's). InvalidArgument
  // when `full` does not fit.
  void load_state_dict(const ::torch::optim::Optimizer& full);
  // The same from an archive written by torch::save(zero.state_dict(), ...) (or by a
  // plain optimizer over these parameters); the full state is loaded on every rank first.
  void load_state_dict(::torch::serialize::InputArchive& archive);

  // The local optimizer (this rank's share): for its options and schedulers.
  ::torch::optim::Optimizer& optimizer() { return *local_; }
  const ::torch::optim::Optimizer& optimizer() const { return *local_; }
  const std::vector<::torch::Tensor>& parameters() const { return params_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  // options().param_sync with kAuto resolved.
  ParamSync param_sync() const { return sync_; }
  const ZeroOptions& options() const { return options_; }

 private:
  void build_flat_buffer();
  void sync_broadcast();
  void sync_all_gather();

  const ZeroOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<::torch::Tensor> params_;
  OptimizerFactory factory_;
  std::vector<int> owner_;                      // per parameter
  std::vector<std::vector<size_t>> partition_;  // per rank
  std::vector<int64_t> rank_elements_;          // per rank: its parameters' elements
  int64_t block_ = 0;  // elements of each rank's block in the flat layout: the largest rank's
  ParamSync sync_ = ParamSync::kBroadcast;
  ::torch::Tensor flat_;  // parameters_as_bucket_view: world x block_ elements
  std::unique_ptr<::torch::optim::Optimizer> local_;
  std::unique_ptr<::torch::optim::Optimizer> consolidated_;
};

}  // namespace tdist::torch
