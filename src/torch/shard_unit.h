// A fully_shard unit (internal; fully_shard.h says what it does for the user): the
// parameters of one module, minus those of the units made inside it before, as one group
// that is gathered with one all_gather and reduce-scattered with one reduce_scatter, in a
// flat buffer of the padded shards (ShardParam). The root unit of a forward (the one called
// outside any other's) also keeps the list of units its forward ran, and at the end of
// backward (Engine::queue_callback) finishes them all: reduce-scatters left (units with
// parameters that got no gradient), waits for every reduce-scatter, reshards.
// Thread-safety: one thread at a time (forward, or the backward pass's thread).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compat.h"
#include "ddp_sync.h"
#include "shard_check.h"
#include "shard_param.h"
#include "tdist/torch/fully_shard.h"
#include "tdist/work.h"

namespace tdist::torch {

class ShardUnit : public std::enable_shared_from_this<ShardUnit> {
 public:
  // Collective (fully_shard.h): checks, copies rank 0's values, shards.
  static std::shared_ptr<ShardUnit> create(::torch::nn::Module& module, FullyShardOptions options);
  ~ShardUnit();
  ShardUnit(const ShardUnit&) = delete;
  ShardUnit& operator=(const ShardUnit&) = delete;

  // Checks across ranks (shard_check.h) that every rank runs this unit with inputs of the
  // same shapes, and that its parameters are its shards; then gathers.
  void pre_forward(const std::vector<::torch::Tensor>& inputs);
  void post_forward(const std::vector<::torch::Tensor>& outputs);
  void forward_failed() noexcept;

  void unshard();                   // gathers (no-op when gathered)
  void reshard();                   // frees the gathered parameters (no-op when sharded)
  void reshard_tree();              // this unit's and the inner units'
  bool set_requires_sync(bool on);  // returns the previous setting

  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  const FullyShardOptions& options() const { return options_; }
  const ::torch::nn::Module& module() const { return *module_; }
  // This unit's parameters and, after them, the inner units', in module order.
  std::vector<ShardParam*> all_params();
  std::vector<const ShardParam*> all_params() const;
  const std::string& prefix_of(const ShardParam* p) const;  // name prefix within this unit
  ShardMemory memory() const;

 private:
  class GradReady;  // the post hook on a parameter's gradient accumulator

  ShardUnit(::torch::nn::Module& module, FullyShardOptions options);
  void init(::torch::nn::Module& module);

  // Backward, per unit: the hook on forward's outputs, a gradient accumulated, all of them.
  void pre_backward();
  void grad_ready(size_t index);
  void post_backward();
  // The root, when backward ends: every unit its forward ran.
  void finish_backward();
  // Waits for this unit's reduce-scatter and adds its gradients to the shards'.
  void finish_reduce();
  // Hooks every parameter's current gradient accumulator (forward made a new one after a
  // dtype change: param_dtype).
  void hook_accumulators();
  // Gathering: started by a prefetch (or by unshard), finished by unshard; a prefetch
  // nobody used is waited for and dropped when forward (eval) or backward ends.
  void start_gather();
  void drop_gather();
  bool any_sharded() const;
  // The root, after its first forward with autograd: links its units in forward order for
  // prefetching.
  void learn_order();
  c10::ScalarType gather_dtype() const;
  c10::ScalarType reduce_dtype() const;
  // The cross-rank checks (shard_check.h): of the wrapping (sets id_), of a forward or
  // backward step of this unit as part of `root`'s call number `call`, which also checks
  // that the parameters are the shards (InvalidArgument naming one that is not, on every
  // rank).
  void check_wrap(const std::vector<NamedTensor>& own);
  void check_run(shard_check::Phase phase, const ShardUnit& root, int64_t call,
                 const std::vector<::torch::Tensor>* inputs) const;
  // 1 + the index of the first parameter replaced or resized outside fully_shard, or minus
  // that for one whose .grad() is not shaped as its shard; 0: none.
  int64_t first_touched() const;
  [[noreturn]] void throw_touched(int rank, int64_t touched) const;
  std::string label() const;                   // "unit 'blocks.2'", "the unit of Net"
  std::string param_path(size_t index) const;  // "blocks.2.weight"
  shard_check::UnitName namer() const;         // labels of this group's units by id

  FullyShardOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  const ::torch::nn::Module* module_;
  int64_t id_ = 0;     // the same on every rank (rank 0's proposal at wrap time)
  std::string path_;   // the module's path in the outermost unit made around it, if any
  int64_t calls_ = 0;  // forwards run as the root
  std::vector<ShardParam> params_;
  std::vector<int64_t> offsets_;  // each parameter's column in the flat buffers
  int64_t flat_numel_ = 0;        // S: padded shard elements per rank
  ::torch::Tensor flat_shard_;    // [S], the shards' storage (their dtype; one dtype per unit)
  // Units inside, with the name prefix of each (their parameters' path from this module).
  struct Inner {
    std::shared_ptr<ShardUnit> unit;
    std::string prefix;
  };
  std::vector<Inner> inner_;

  // Backward state.
  std::vector<compat::NodePtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<char> ready_;
  size_t ready_count_ = 0, needs_grad_ = 0;
  std::vector<::torch::Tensor> held_grads_;   // shards' .grad() while gathered
  std::vector<::torch::Tensor> local_grads_;  // whole gradients kept under no_sync
  bool in_backward_ = false, post_backward_done_ = true;
  bool requires_sync_ = true;
  WorkPtr reduce_work_;
  ::torch::Tensor reduce_input_, reduce_output_;

  WorkPtr gather_work_;
  ::torch::Tensor gather_input_, gather_output_;
  // The unit to prefetch after this one's forward / its part of backward, as the root's
  // first forward ran them.
  std::weak_ptr<ShardUnit> forward_next_, backward_next_;
  bool order_known_ = false;  // (root) the links are made

  // Root state: the units its forward ran (itself first), whether the end-of-backward
  // callback is queued.
  std::vector<std::weak_ptr<ShardUnit>> ran_;
  std::vector<std::weak_ptr<ShardUnit>> finished_;  // the same, as their forwards ended
  std::weak_ptr<ShardUnit> root_;
  std::weak_ptr<ShardUnit> last_reduce_;  // the unit whose reduce-scatter was launched last
  bool callback_queued_ = false;
  bool grad_forward_ = false;  // the last forward built a graph
};

}  // namespace tdist::torch
