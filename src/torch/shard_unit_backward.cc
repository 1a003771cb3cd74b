// ShardUnit's backward part (shard_unit.h): the hooks on a unit's forward outputs and on its
// parameters' gradient accumulators, the reduce-scatter of a unit's gradients into the
// shards' .grad(), and the root's end of backward.
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <memory>
#include <utility>

#include "shard_pool.h"
#include "shard_unit.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch {

// Runs after AccumulateGrad stored a parameter's (whole) gradient.
class ShardUnit::GradReady final : public ::torch::autograd::FunctionPostHook {
 public:
  GradReady(ShardUnit& unit, size_t index) : unit_(unit), index_(index) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    unit_.grad_ready(index_);
    return outputs;
  }

 private:
  ShardUnit& unit_;
  const size_t index_;
};

void ShardUnit::hook_accumulators() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad()) continue;
    compat::NodePtr acc = ::torch::autograd::impl::grad_accumulator(params_[i].param());
    if (acc.get() == accumulators_[i].get()) continue;
    if (accumulators_[i] != nullptr) accumulators_[i]->del_post_hook(hook_keys_[i]);
    hook_keys_[i] = acc->add_post_hook(std::make_unique<GradReady>(*this, i));
    accumulators_[i] = std::move(acc);
  }
}

void ShardUnit::pre_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  std::shared_ptr<ShardUnit> root = root_.lock();
  const ShardUnit& checked_root = root != nullptr ? *root : *this;
  check_run(shard_check::Phase::kBackward, checked_root, checked_root.calls_, nullptr);
  unshard();
  if (std::shared_ptr<ShardUnit> next = backward_next_.lock()) next->start_gather();
  if (root != nullptr && !root->callback_queued_) {
    root->callback_queued_ = true;
    std::weak_ptr<ShardUnit> weak = root;
    ::torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      if (std::shared_ptr<ShardUnit> unit = weak.lock()) unit->finish_backward();
    });
  }
}

void ShardUnit::grad_ready(size_t index) {
  if (!in_backward_ || post_backward_done_ || ready_[index] != 0) return;
  ready_[index] = 1;
  if (++ready_count_ == needs_grad_) post_backward();
}

void ShardUnit::post_backward() {
  post_backward_done_ = true;
  ::torch::NoGradGuard no_grad;
  std::vector<::torch::Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    ShardParam& p = params_[i];
    if (!p.requires_grad() || p.is_sharded()) continue;
    grads[i] = p.param().grad();
    p.param().mutable_grad() = ::torch::Tensor();
    if (!requires_sync_ && grads[i].defined()) {  // no_sync: kept whole, added up
      local_grads_[i] = local_grads_[i].defined() ? local_grads_[i].add_(grads[i]) : grads[i];
    }
  }
  // The gathered parameters are not needed any more: freed before the reduce-scatter's
  // buffers are made (peak memory).
  reshard();
  if (!requires_sync_ || flat_numel_ == 0) return;
  // One reduce-scatter in flight at a time, besides the collectives of compute: the
  // previous unit's (launched while this unit's backward ran, so mostly done) is finished
  // before this one's whole-size input exists, so that at most one such input is alive.
  if (std::shared_ptr<ShardUnit> root = root_.lock()) {
    if (std::shared_ptr<ShardUnit> previous = root->last_reduce_.lock()) {
      if (previous.get() != this) previous->finish_reduce();
    }
    root->last_reduce_ = weak_from_this();
  }
  const int world = group_->size();
  reduce_input_ =
      shard_pool::empty({world, flat_numel_}, flat_shard_.options().dtype(reduce_dtype()));
  for (size_t i = 0; i < params_.size(); ++i) {
    ::torch::Tensor g = std::move(grads[i]);  // each whole gradient freed once copied
    if (local_grads_[i].defined()) {
      g = g.defined() ? g.add(local_grads_[i]) : local_grads_[i];
      local_grads_[i] = ::torch::Tensor();
    }
    params_[i].scatter_grad_into(params_[i].requires_grad() ? g : ::torch::Tensor(), reduce_input_,
                                 offsets_[i]);
  }
  // In place: this rank's row of the input receives its reduced shard.
  reduce_output_ = reduce_input_[group_->rank()];
  reduce_work_ = reduce_scatter_tensor_async(reduce_output_, reduce_input_.view({-1}),
                                             ReduceOpKind::kAvg, group_);
}

void ShardUnit::finish_reduce() {
  if (reduce_work_ == nullptr) return;
  WorkPtr work = std::move(reduce_work_);
  reduce_work_ = nullptr;
  work->wait();
  ::torch::NoGradGuard no_grad;
  const int rank = group_->rank();
  for (size_t i = 0; i < params_.size(); ++i) {
    ShardParam& p = params_[i];
    if (!p.requires_grad()) continue;
    const ::torch::Tensor g = reduce_output_.narrow(0, offsets_[i], p.rows_of(rank) * p.row_numel())
                                  .view(p.shard().sizes());
    ::torch::Tensor& grad = p.param().mutable_grad();
    if (grad.defined()) {
      grad.add_(g);
    } else {  // a new gradient (zero_grad drops them), in a pooled block as the others
      grad = shard_pool::empty(p.shard().sizes(), p.shard().options());
      grad.copy_(g);
    }
  }
  reduce_input_ = ::torch::Tensor();
  reduce_output_ = ::torch::Tensor();
}

void ShardUnit::finish_backward() {
  callback_queued_ = false;
  std::vector<std::shared_ptr<ShardUnit>> units;
  for (const std::weak_ptr<ShardUnit>& w : ran_) {
    if (std::shared_ptr<ShardUnit> u = w.lock()) units.push_back(std::move(u));
  }
  ran_.clear();
  finished_.clear();
  // Units whose gradients did not all arrive (parameters unused this pass, or a unit
  // backward never reached) reduce what they have, in reverse forward order on every rank.
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    ShardUnit& u = **it;
    if (!u.post_backward_done_) u.post_backward();
  }
  for (const std::shared_ptr<ShardUnit>& u : units) {
    u->drop_gather();
    u->finish_reduce();
    u->reshard();
    u->in_backward_ = false;
  }
}

}  // namespace tdist::torch
