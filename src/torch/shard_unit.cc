#include "shard_unit.h"

// Internal LibTorch headers, as the Reducer's (reducer.cc): a parameter's gradient
// accumulator and its post hooks (through compat.h), and the end of a backward pass
// (Engine::queue_callback).
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ddp_sync.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

// Every live unit, by its module: a new unit leaves out the parameters of those inside it.
std::mutex registry_mu;
std::unordered_map<const ::torch::nn::Module*, std::weak_ptr<ShardUnit>>& registry() {
  static auto* units = new std::unordered_map<const ::torch::nn::Module*, std::weak_ptr<ShardUnit>>;
  return *units;
}

// The root unit whose forward runs on this thread.
thread_local ShardUnit* forward_root = nullptr;

void check_supported(const NamedTensor& t) {
  TDIST_CHECK(t.tensor.device().is_cpu() || (TDIST_TORCH_CUDA && t.tensor.device().is_cuda()),
              InvalidArgument, "fully_shard: parameter '", t.name, "' is on ", t.tensor.device(),
              "; tdist takes CPU", TDIST_TORCH_CUDA ? " and CUDA" : "", " tensors");
  TDIST_CHECK(t.tensor.layout() == ::torch::kStrided, InvalidArgument, "fully_shard: parameter '",
              t.name, "' is not a dense tensor");
  TDIST_CHECK(at::isFloatingType(t.tensor.scalar_type()), InvalidArgument,
              "fully_shard: parameter '", t.name, "' is ", t.tensor.scalar_type(),
              "; fully_shard shards floating-point parameters");
}

}  // namespace

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

std::shared_ptr<ShardUnit> ShardUnit::create(::torch::nn::Module& module,
                                             FullyShardOptions options) {
  std::shared_ptr<ShardUnit> unit(new ShardUnit(module, std::move(options)));
  unit->init(module);
  std::lock_guard<std::mutex> lock(registry_mu);
  registry()[&module] = unit;
  return unit;
}

ShardUnit::ShardUnit(::torch::nn::Module& module, FullyShardOptions options)
    : options_(std::move(options)),
      group_(options_.process_group != nullptr ? options_.process_group : get_default_group()),
      module_(&module) {
  options_.process_group = group_;
}

ShardUnit::~ShardUnit() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    if (accumulators_[i] != nullptr) accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
  if (reduce_work_ != nullptr) {
    try {
      reduce_work_->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the backward that launched it failed
    }
  }
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry().find(module_);
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

void ShardUnit::init(::torch::nn::Module& module) {
  // The units inside, and the parameters they hold.
  std::unordered_set<const void*> taken;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (const auto& item : module.named_modules("", /*include_self=*/false)) {
      auto it = registry().find(item.value().get());
      if (it == registry().end()) continue;
      std::shared_ptr<ShardUnit> unit = it->second.lock();
      if (unit == nullptr) continue;
      for (const ShardParam& p : unit->params_) taken.insert(p.param().unsafeGetTensorImpl());
      inner_.push_back({std::move(unit), item.key() + "."});
    }
  }
  std::vector<NamedTensor> own;
  for (const auto& item : module.named_parameters()) {
    if (taken.insert(item.value().unsafeGetTensorImpl()).second) {
      own.push_back({item.key(), item.value()});
    }
  }
  for (const NamedTensor& t : own) {
    check_supported(t);
    TDIST_CHECK(t.tensor.scalar_type() == own[0].tensor.scalar_type() &&
                    t.tensor.device() == own[0].tensor.device(),
                InvalidArgument, "fully_shard: parameter '", t.name, "' is ",
                t.tensor.scalar_type(), " on ", t.tensor.device(), " but '", own[0].name, "' is ",
                own[0].tensor.scalar_type(), " on ", own[0].tensor.device(),
                "; a unit's parameters share one dtype and device (wrap the others apart)");
  }
  verify_same_shapes(*group_, own, "fully_shard: the ranks' models differ; parameters");
  std::vector<::torch::Tensor> tensors;
  for (const NamedTensor& t : own) tensors.push_back(t.tensor);
  broadcast_coalesced(*group_, tensors, /*root=*/0);

  const int rank = group_->rank();
  const int world = group_->size();
  for (NamedTensor& t : own) {
    params_.emplace_back(std::move(t.name), t.tensor, rank, world);
    offsets_.push_back(flat_numel_);
    flat_numel_ += params_.back().padded_numel();
  }
  const ::torch::TensorOptions options = params_.empty()
                                             ? ::torch::TensorOptions(::torch::kFloat)
                                             : params_[0].param().options().requires_grad(false);
  flat_shard_ = ::torch::zeros({flat_numel_}, options);
  accumulators_.resize(params_.size());
  hook_keys_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  held_grads_.resize(params_.size());
  local_grads_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad()) ++needs_grad_;
  }
  hook_accumulators();  // while whole: the accumulators expect whole gradients
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].shard_into(flat_shard_.narrow(0, offsets_[i], params_[i].padded_numel()));
  }
}

c10::ScalarType ShardUnit::gather_dtype() const {
  return options_.param_dtype.value_or(flat_shard_.scalar_type());
}

c10::ScalarType ShardUnit::reduce_dtype() const {
  return options_.reduce_dtype.value_or(gather_dtype());
}

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

void ShardUnit::check_params_untouched() const {
  for (const ShardParam& p : params_) {
    if (!p.is_sharded()) continue;
    TDIST_CHECK(p.holds_shard(), Error, "fully_shard: parameter '", p.name(),
                "' was replaced or resized outside fully_shard (it should be this rank's shard, ",
                p.shard().sizes(), " ", p.shard().scalar_type(), ", but is ", p.param().sizes(),
                " ", p.param().scalar_type(),
                "); change sharded parameters in place only, or use load_full_state_dict");
  }
}

bool ShardUnit::any_sharded() const {
  for (const ShardParam& p : params_) {
    if (p.is_sharded()) return true;
  }
  return false;
}

void ShardUnit::start_gather() {
  if (gather_work_ != nullptr || !any_sharded()) return;
  ::torch::NoGradGuard no_grad;
  const c10::ScalarType dtype = gather_dtype();
  gather_input_ = dtype == flat_shard_.scalar_type() ? flat_shard_ : flat_shard_.to(dtype);
  gather_output_ = ::torch::empty({group_->size() * flat_numel_}, gather_input_.options());
  gather_work_ = all_gather_into_tensor_async(gather_output_, gather_input_, group_);
}

void ShardUnit::drop_gather() {
  if (gather_work_ == nullptr) return;
  WorkPtr work = std::move(gather_work_);
  gather_work_ = nullptr;
  gather_input_ = gather_output_ = ::torch::Tensor();
  work->wait();
}

void ShardUnit::unshard() {
  if (!any_sharded()) return;
  start_gather();
  WorkPtr work = std::move(gather_work_);
  gather_work_ = nullptr;
  work->wait();
  ::torch::NoGradGuard no_grad;
  const c10::ScalarType dtype = gather_dtype();
  const ::torch::Tensor gathered = gather_output_.view({group_->size(), flat_numel_});
  gather_input_ = gather_output_ = ::torch::Tensor();
  for (size_t i = 0; i < params_.size(); ++i) {
    ShardParam& p = params_[i];
    if (!p.is_sharded()) continue;
    // The shard's gradient waits aside: backward accumulates whole ones meanwhile.
    held_grads_[i] = p.param().grad();
    if (held_grads_[i].defined()) p.param().mutable_grad() = ::torch::Tensor();
    p.unshard_from(gathered, offsets_[i], dtype);
  }
}

void ShardUnit::reshard() {
  for (size_t i = 0; i < params_.size(); ++i) {
    ShardParam& p = params_[i];
    if (p.is_sharded()) continue;
    p.param().mutable_grad() = ::torch::Tensor();
    p.reshard();
    if (held_grads_[i].defined()) p.param().mutable_grad() = std::move(held_grads_[i]);
    held_grads_[i] = ::torch::Tensor();
  }
}

void ShardUnit::reshard_tree() {
  reshard();
  for (Inner& in : inner_) in.unit->reshard();
}

bool ShardUnit::set_requires_sync(bool on) {
  const bool previous = requires_sync_;
  requires_sync_ = on;
  for (Inner& in : inner_) in.unit->requires_sync_ = on;
  return previous;
}

void ShardUnit::pre_forward() {
  check_params_untouched();  // each unit its own, before its gather
  grad_forward_ = c10::GradMode::is_enabled();
  std::shared_ptr<ShardUnit> self = shared_from_this();
  if (forward_root == nullptr) {
    forward_root = this;
    if (!callback_queued_) {
      ran_.clear();
      finished_.clear();
    }
    root_ = self;
  } else {
    root_ = forward_root->weak_from_this();
  }
  if (grad_forward_) {
    if (ShardUnit* root = forward_root) root->ran_.push_back(self);
    in_backward_ = false;
    post_backward_done_ = false;
    ready_.assign(params_.size(), 0);
    ready_count_ = 0;
  }
  unshard();
  if (std::shared_ptr<ShardUnit> next = forward_next_.lock()) next->start_gather();  // prefetch
  if (grad_forward_) hook_accumulators();
}

namespace {

// The units of `ran`, or none if one is gone or was called twice (no chain to prefetch by).
std::vector<std::shared_ptr<ShardUnit>> chain_of(const std::vector<std::weak_ptr<ShardUnit>>& ran) {
  std::vector<std::shared_ptr<ShardUnit>> units;
  for (const std::weak_ptr<ShardUnit>& w : ran) {
    std::shared_ptr<ShardUnit> u = w.lock();
    if (u == nullptr || std::find(units.begin(), units.end(), u) != units.end()) return {};
    units.push_back(std::move(u));
  }
  return units;
}

}  // namespace

void ShardUnit::learn_order() {
  order_known_ = true;
  // Forward: as the forwards began (the root first). Backward: as they ended, reversed
  // (the root's part of backward comes first).
  const std::vector<std::shared_ptr<ShardUnit>> began = chain_of(ran_);
  for (size_t k = 0; k + 1 < began.size(); ++k) began[k]->forward_next_ = began[k + 1];
  const std::vector<std::shared_ptr<ShardUnit>> ended = chain_of(finished_);
  for (size_t k = 1; k < ended.size(); ++k) ended[k]->backward_next_ = ended[k - 1];
}

void ShardUnit::post_forward(const std::vector<::torch::Tensor>& outputs) {
  const bool root = forward_root == this;
  if (grad_forward_) {
    std::weak_ptr<ShardUnit> weak = weak_from_this();
    for (const ::torch::Tensor& t : outputs) {
      if (!t.requires_grad()) continue;
      // Before this unit's part of backward: the gradient of its output is being used.
      t.register_hook([weak](const ::torch::Tensor& grad) {
        if (std::shared_ptr<ShardUnit> unit = weak.lock()) unit->pre_backward();
        return grad;
      });
    }
    if (ShardUnit* r = forward_root) r->finished_.push_back(weak);
  }
  if (!root && options_.reshard_after_forward) reshard();
  if (!root) return;
  forward_root = nullptr;
  if (grad_forward_ && !order_known_) learn_order();
  if (!grad_forward_) {  // no backward follows: a prefetch left unused goes now
    for (auto u = forward_next_.lock(); u != nullptr; u = u->forward_next_.lock()) {
      u->drop_gather();
    }
  }
}

void ShardUnit::forward_failed() noexcept {
  if (forward_root == this) forward_root = nullptr;
}

void ShardUnit::pre_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  unshard();
  if (std::shared_ptr<ShardUnit> next = backward_next_.lock()) next->start_gather();
  std::shared_ptr<ShardUnit> root = root_.lock();
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
  reduce_input_ = ::torch::empty({world, flat_numel_}, flat_shard_.options().dtype(reduce_dtype()));
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
    ::torch::Tensor g = reduce_output_.narrow(0, offsets_[i], p.rows_of(rank) * p.row_numel())
                            .view(p.shard().sizes())
                            .to(p.dtype(), /*non_blocking=*/false, /*copy=*/true);
    ::torch::Tensor& grad = p.param().mutable_grad();
    if (grad.defined()) {
      grad.add_(g);
    } else {
      grad = g;
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

std::vector<ShardParam*> ShardUnit::all_params() {
  std::vector<ShardParam*> out;
  for (ShardParam& p : params_) out.push_back(&p);
  for (Inner& in : inner_) {
    for (ShardParam& p : in.unit->params_) out.push_back(&p);
  }
  return out;
}

std::vector<const ShardParam*> ShardUnit::all_params() const {
  std::vector<const ShardParam*> out;
  for (const ShardParam& p : params_) out.push_back(&p);
  for (const Inner& in : inner_) {
    for (const ShardParam& p : in.unit->params_) out.push_back(&p);
  }
  return out;
}

const std::string& ShardUnit::prefix_of(const ShardParam* p) const {
  static const std::string none;
  for (const Inner& in : inner_) {
    for (const ShardParam& q : in.unit->params_) {
      if (&q == p) return in.prefix;
    }
  }
  return none;
}

ShardMemory ShardUnit::memory() const {
  ShardMemory m;
  m.sharded_params = static_cast<int64_t>(flat_shard_.nbytes());
  for (const ShardParam& p : params_) {
    m.full_params += p.full_bytes();
    const ::torch::Tensor& grad = p.is_sharded() ? p.param().grad() : ::torch::Tensor();
    if (grad.defined()) m.sharded_grads += static_cast<int64_t>(grad.nbytes());
  }
  return m;
}

}  // namespace tdist::torch
