// Sharded data parallelism for LibTorch modules, after PyTorch's FSDP2 (fully_shard): each
// rank keeps 1/world of every parameter, of its gradient and so of the optimizer's state;
// a unit's parameters are gathered whole only while its forward or backward runs.
//
//   tdist::init_process_group("shm");
//   auto net = std::make_shared<Net>();            // every rank builds the same model
//   std::vector<tdist::torch::FullyShardedModule<Block>> blocks;
//   for (auto& b : net->blocks) blocks.push_back(tdist::torch::fully_shard(b));  // units
//   auto model = tdist::torch::fully_shard(net);   // the root: the parameters left over
//   torch::optim::Adam opt(net->parameters(), 1e-3);  // the shards
//   for (...) {
//     opt.zero_grad();
//     torch::mse_loss(model(x), y).backward();  // sharded gradients, averaged over ranks
//     opt.step();
//   }
//   // Net::forward calls each block through its unit: x = blocks_[i](x) (see below).
//
// Units. fully_shard(module) makes `module` a unit: its parameters, except those of units
// made before inside it, are sharded on dim 0 across the group (rank r keeps rows
// [r*c, (r+1)*c) with c = ceil(rows/world); the last ranks' shards may be short or empty;
// scalars count as one row), and module->parameters() are those shards from then on: build
// the optimizer on them (one built before fully_shard holds the same tensors, so it works too
// if it has not stepped yet: check_optimizer). Wrap inner units first (each block), then the
// root. Construction is collective: every rank must wrap the same modules in the same order
// (see Errors); rank 0's values win: every rank's shard is cut from rank 0's parameters.
//
// Forward. LibTorch modules have no forward hooks, so a unit runs only through its handle:
// handle(args...) (or ->forward) gathers the unit's parameters (one all_gather of all of
// them), calls module->forward(args...), and frees them again unless the unit is the root
// or reshard_after_forward is off. Code that calls a unit's module->forward directly sees
// its shards. The root (the unit whose forward runs outside any other unit's) also learns
// the order of its units in the first forward, and from the second on gathers the next
// unit's parameters while this one computes (prefetch).
//
// Backward. Hooks on a unit's forward outputs gather its parameters again before its part
// of backward; once every gradient of the unit has been accumulated its gradients are
// reduce-scattered (averaged, in reduce_dtype) into the shards' .grad() and the gathered
// parameters and gradients are freed, while backward goes on with the next unit. When
// backward ends every reduce-scatter has been waited for: optimizer.step() needs nothing
// more. A parameter of a unit that got no gradient counts as a zero gradient. Gradients add
// to the shards' existing .grad() (zero_grad sets them to none or zero, as usual).
//
// Mixed precision: param_dtype gathers and computes in that dtype (the shards, the
// optimizer's master weights, stay in their own dtype), and the unit's floating Tensor
// arguments are cast to it (FSDP2's cast_forward_inputs), so its output has that dtype too;
// reduce_dtype reduces gradients in that one (default: the gathered dtype); the shards'
// gradients have the shards' dtype.
//
// no_sync(): while the guard lives, backward passes keep the unit's (and, on the root, every
// unit's) gradients whole and local, adding up, with no communication; the next
// synchronized backward reduce-scatters the sum. Memory: whole gradients meanwhile.
//
// State dicts (collective): full_state_dict() gathers every parameter whole (on every rank,
// or only on rank 0), named as module->named_parameters() names them on a model that is not
// sharded; sharded_state_dict() is each rank's shards with their global shape and offsets
// (what a distributed checkpoint writes); load_full_state_dict and load_sharded_state_dict
// put values back (the latter from shards cut for any world size: each rank keeps the rows
// it owns).
//
// Errors. Before each wrap and before each unit's forward and backward (gather), the ranks
// of its group compare what they are about to do in one small all_gather (128 bytes per
// rank, once per unit and pass: tens of microseconds): which unit, forward or backward, the
// root's call number, and the shapes and dtypes of the forward's Tensor arguments. So that
//  - ranks that wrap different modules, or the same in another order, or models that differ
//    (a parameter's name or shape), raise DesyncError on every rank from the fully_shard call
//    where the wrapping parts, naming both sides: "the ranks' wrapping is out of step ...:
//    rank 0 wraps a Linear with parameters 'weight' [7, 7], 'bias' [7] where rank 1 wraps a
//    Net with the units 'block0', 'block2' inside (in wrap order) and parameters ...";
//  - ranks that call different units, in another order, skip a unit, run forward where
//    another runs backward, or pass inputs of other shapes, raise DesyncError on every rank
//    from that forward or backward: "the ranks are out of step ...: rank 0 runs unit 'block1'
//    forward with input [4, 7] where rank 1 runs unit 'block2' forward with input [4, 7]"
//    (units are named by their path in the outermost unit around them; rank 0 and the first
//    rank that differs are named);
//  - a parameter replaced or resized outside fully_shard between steps (set_data with any
//    other tensor, even of the shard's shape; changes in place, as optimizers make, are
//    fine) raises InvalidArgument on every rank from that unit's next forward, naming the
//    parameter by path ("parameter 'block2.weight' was replaced or resized ...") and, on the
//    other ranks, the rank that changed it; so does a shard whose .grad() is not shaped as
//    the shard (a whole gradient left from a backward before wrapping: zero_grad after it).
// Limits: a rank that calls more units (or steps) than the others, where the others call no
// more collectives on the group, waits out the group's timeout (TimeoutError), as for any
// collective a rank skips; a difference the header does not see (the values of the inputs,
// Tensors inside arguments other than Tensor, std::vector, std::tuple and std::pair, modules
// called outside their handles) goes unnoticed; every input's shape and dtype is compared
// (hashed), the message shows the first two inputs' first dims. After such an error the
// model is left mid-step: rebuild it (and the group, after a TimeoutError). check_optimizer
// (below) finds an optimizer that holds tensors which are not the shards, or state from steps
// taken before wrapping.
//
// Thread-safety: one thread at a time per model (forward; backward may run on any thread).
// The handles must outlive the backward passes of their forwards.
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/torch/forward_outputs.h"

namespace tdist::torch {

class ShardUnit;  // src/torch/shard_unit.h

struct FullyShardOptions {
  std::shared_ptr<ProcessGroup> process_group;  // nullptr: tdist::get_default_group()
  // Free the gathered parameters after forward (gather again for backward). The root keeps
  // them either way (its backward comes first).
  bool reshard_after_forward = true;
  std::optional<c10::ScalarType> param_dtype;   // gathers and compute; default: as stored
  std::optional<c10::ScalarType> reduce_dtype;  // gradient reduction; default: param_dtype
};

// One entry of sharded_state_dict(): this rank's rows [offset, offset + shard.size(0)) of
// a parameter of global shape `global_shape` (scalars: shape {}, one row).
struct ShardedTensor {
  std::string name;
  ::torch::Tensor shard;  // this rank's rows (may have 0 rows); a copy
  std::vector<int64_t> global_shape;
  int64_t offset = 0;  // first global row
};

// One entry of local_shards(): a parameter as the module and an optimizer hold it (`param`),
// and this rank's rows of it (`rows.shard`: a view of the live shard, not a copy).
struct LocalShard {
  ShardedTensor rows;
  ::torch::Tensor param;
};

// What a unit holds, in bytes, on this rank (for the memory yardstick).
struct ShardMemory {
  int64_t sharded_params = 0;  // the shards (padded)
  int64_t sharded_grads = 0;   // their gradients
  int64_t full_params = 0;     // gathered now
};

// The part of a unit's handle that does not depend on the module type.
class FullyShardedBase {
 public:
  FullyShardedBase(const FullyShardedBase&) = delete;
  FullyShardedBase& operator=(const FullyShardedBase&) = delete;
  FullyShardedBase(FullyShardedBase&&) noexcept;
  FullyShardedBase& operator=(FullyShardedBase&&) noexcept;
  virtual ~FullyShardedBase();

  class [[nodiscard]] NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class FullyShardedBase;
    explicit NoSyncGuard(std::shared_ptr<ShardUnit> unit);
    std::shared_ptr<ShardUnit> unit_;
    bool previous_;
  };
  // While it lives, backward passes accumulate whole gradients locally (see above).
  NoSyncGuard no_sync();

  // Gathers the unit's parameters now / frees them (outside forward and backward).
  void unshard();
  void reshard();

  // Collective. Every parameter of this unit and of the units inside it, whole, by name
  // (relative to this unit's module); with rank0_only, empty on the other ranks.
  std::vector<std::pair<std::string, ::torch::Tensor>> full_state_dict(bool rank0_only = false);
  // Not collective: this rank's shards of the same parameters.
  std::vector<ShardedTensor> sharded_state_dict() const;
  // Not collective: the same parameters' live shards (writing into `rows.shard` in place,
  // outside forward and backward, changes the parameter; distributed checkpoints load so).
  std::vector<LocalShard> local_shards() const;
  // Collective. Values for every parameter named (all must be named; shapes must match):
  // whole tensors (the same on every rank) / shards with offsets (each rank keeps the rows
  // it owns; `shards` may hold any ranks' shards, and must cover this rank's rows).
  void load_full_state_dict(const std::vector<std::pair<std::string, ::torch::Tensor>>& state);
  void load_sharded_state_dict(const std::vector<ShardedTensor>& shards);

  // Not collective. InvalidArgument naming the parameter when `optimizer` holds a tensor
  // that is not a shard of this unit or of the units inside it (e.g. a parameter of a
  // module no unit wraps, or of another copy of the model), or state (SGD's momentum,
  // Adam's and AdamW's moments, Adagrad's sums, RMSprop's averages) shaped as a whole
  // parameter rather than as this rank's shard (it stepped before fully_shard). Call it on
  // the outermost unit, on every rank, after building the optimizer (see Errors above).
  void check_optimizer(const ::torch::optim::Optimizer& optimizer) const;

  // This unit's (not the inner units') bytes.
  ShardMemory memory() const;
  const std::shared_ptr<ProcessGroup>& process_group() const;

 protected:
  FullyShardedBase(::torch::nn::Module& module, FullyShardOptions options);
  // Around the wrapped forward (see the file comment).
  void pre_forward(const std::vector<::torch::Tensor>& inputs);  // the Tensor arguments
  void post_forward(const std::vector<::torch::Tensor>& outputs);
  // After a forward that threw: leave no root state behind.
  void forward_failed() noexcept;
  // A floating forward argument in param_dtype, when set; else `t` itself.
  ::torch::Tensor cast_forward_input(const ::torch::Tensor& t) const;

 private:
  std::shared_ptr<ShardUnit> unit_;
};

// ModuleHandle: std::shared_ptr<M> for a torch::nn::Module subclass M, or a ModuleHolder
// such as torch::nn::Linear; deduced from fully_shard's argument.
template <typename ModuleHandle>
class FullyShardedModule : public FullyShardedBase {
 public:
  explicit FullyShardedModule(ModuleHandle module, FullyShardOptions options = {})
      : FullyShardedBase(detail::module_of(module, "fully_shard"), std::move(options)),
        module_(std::move(module)) {}

  // module->forward(args...) with the unit's parameters gathered (see the file comment).
  template <typename... Args>
  auto forward(Args&&... args) {
    std::vector<::torch::Tensor> inputs;
    (detail::collect_tensors(args, inputs), ...);
    pre_forward(inputs);
    try {
      auto output = module_->forward(cast_input(std::forward<Args>(args))...);
      std::vector<::torch::Tensor> tensors;
      detail::collect_tensors(output, tensors);
      post_forward(tensors);
      return output;
    } catch (...) {
      forward_failed();
      throw;
    }
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  const ModuleHandle& module() const { return module_; }

 private:
  // Tensor arguments in param_dtype (see the file comment); the others as they are.
  template <typename T>
  decltype(auto) cast_input(T&& arg) {
    if constexpr (std::is_same_v<std::decay_t<T>, ::torch::Tensor>) {
      return cast_forward_input(arg);
    } else {
      return std::forward<T>(arg);
    }
  }

  ModuleHandle module_;
};

// Makes `module` a unit (see the file comment); collective.
template <typename ModuleHandle>
FullyShardedModule<ModuleHandle> fully_shard(ModuleHandle module, FullyShardOptions options = {}) {
  return FullyShardedModule<ModuleHandle>(std::move(module), std::move(options));
}

}  // namespace tdist::torch
