// ShardUnit (shard_unit.h): wrapping (collective, checked across ranks), gathering and
// freeing a unit's parameters, and its forward; the backward part is in
// shard_unit_backward.cc.
#include "shard_unit.h"

#include <c10/core/GradMode.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ddp_sync.h"
#include "shard_pool.h"
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

// Ids proposed at wrap time (every rank takes rank 0's): unique among a process's units.
std::atomic<int64_t> next_unit_id{1};

// "Net" for "tdist::torch::(anonymous namespace)::Net", "Linear" for "torch::nn::LinearImpl".
std::string short_class_name(const std::string& name) {
  const size_t colon = name.rfind("::");
  std::string out = colon == std::string::npos ? name : name.substr(colon + 2);
  if (out.size() > 4 && out.compare(out.size() - 4, 4, "Impl") == 0) out.resize(out.size() - 4);
  return out;
}

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
  check_wrap(own);
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

void ShardUnit::check_wrap(const std::vector<NamedTensor>& own) {
  shard_check::WrapInfo wrap;
  wrap.proposed_id = next_unit_id.fetch_add(1);
  wrap.module = short_class_name(module_->name());
  for (const NamedTensor& t : own) {
    wrap.param_names.push_back(t.name);
    wrap.params.push_back(t.tensor);
  }
  for (const Inner& in : inner_)
    wrap.inner.emplace_back(in.unit->id_, in.prefix.substr(0, in.prefix.size() - 1));
  std::sort(wrap.inner.begin(), wrap.inner.end());  // wrap order
  id_ = wrap.proposed_id;
  if (group_->size() > 1) {
    const c10::Device device = own.empty() ? c10::Device(c10::kCPU) : own[0].tensor.device();
    const std::vector<shard_check::Header> all =
        shard_check::exchange(*group_, shard_check::wrap_header(wrap), device);
    if (const int r = shard_check::first_difference(all); r >= 0) {
      shard_check::throw_desync(*group_, all, r, namer(), &wrap);
    }
    id_ = all[0][1];
  }
  // The outermost unit's paths win: they are what the user's model calls its modules.
  for (Inner& in : inner_) in.unit->path_ = in.prefix.substr(0, in.prefix.size() - 1);
}

std::string ShardUnit::label() const {
  return path_.empty() ? "the unit of " + short_class_name(module_->name())
                       : "unit '" + path_ + "'";
}

shard_check::UnitName ShardUnit::namer() const {
  return [group = group_.get()](int64_t id) {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (const auto& [module, weak] : registry()) {
      std::shared_ptr<ShardUnit> unit = weak.lock();
      if (unit != nullptr && unit->group_.get() == group && unit->id_ == id) return unit->label();
    }
    return ::tdist::detail::str_cat("unit #", id);
  };
}

std::string ShardUnit::param_path(size_t index) const {
  return path_.empty() ? params_[index].name() : path_ + "." + params_[index].name();
}

int64_t ShardUnit::first_touched() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const ShardParam& p = params_[i];
    if (!p.is_sharded()) continue;
    if (!p.holds_shard()) return static_cast<int64_t>(i) + 1;
    const ::torch::Tensor& grad = p.param().grad();
    if (grad.defined() && grad.sizes() != p.shard().sizes()) return -static_cast<int64_t>(i) - 1;
  }
  return 0;
}

void ShardUnit::throw_touched(int rank, int64_t touched) const {
  const bool by_grad = touched < 0;
  const auto index = static_cast<size_t>((by_grad ? -touched : touched) - 1);
  const ShardParam& p = params_[index];
  if (by_grad) {  // a gradient from before wrapping (an optimizer built on the whole ones?)
    TDIST_CHECK(rank != group_->rank(), InvalidArgument, "fully_shard: parameter '",
                param_path(index), "' has a gradient of shape ", p.param().grad().sizes(),
                " but its shard is ", p.shard().sizes(),
                " (a gradient of the whole parameter, from a backward before fully_shard, or set "
                "outside it): zero the gradients (optimizer.zero_grad()) after wrapping");
    TDIST_THROW(InvalidArgument, "fully_shard: parameter '", param_path(index), "' of rank ", rank,
                " has a gradient that is not shaped as its shard (rank ", rank,
                "'s error says how)");
  }
  const char* const advice =
      "; change sharded parameters in place only (as optimizers do), or use load_full_state_dict";
  if (rank == group_->rank()) {
    TDIST_THROW(InvalidArgument, "fully_shard: parameter '", param_path(index),
                "' was replaced or resized outside fully_shard (it should be this rank's shard, ",
                p.shard().sizes(), " ", p.shard().scalar_type(), " at ", p.shard().data_ptr(),
                ", but is ", p.param().sizes(), " ", p.param().scalar_type(), " at ",
                p.param().data_ptr(), ")", advice);
  }
  TDIST_THROW(InvalidArgument, "fully_shard: parameter '", param_path(index), "' of rank ", rank,
              " was replaced or resized outside fully_shard (rank ", rank, "'s error says how)",
              advice);
}

void ShardUnit::check_run(shard_check::Phase phase, const ShardUnit& root, int64_t call,
                          const std::vector<::torch::Tensor>* inputs) const {
  const int64_t touched = phase == shard_check::Phase::kForward ? first_touched() : 0;
  if (group_->size() == 1) {
    if (touched != 0) throw_touched(0, touched);
    return;
  }
  shard_check::RunInfo info;
  info.phase = phase;
  info.unit = id_;
  info.root = root.id_;
  info.call = call;
  info.touched = touched;
  info.inputs = inputs;
  const std::vector<shard_check::Header> all =
      shard_check::exchange(*group_, shard_check::run_header(info), flat_shard_.device());
  if (const int r = shard_check::first_difference(all); r >= 0) {
    shard_check::throw_desync(*group_, all, r, namer(), nullptr);
  }
  if (touched != 0) throw_touched(group_->rank(), touched);
  for (size_t r = 0; r < all.size(); ++r) {  // another rank's
    if (all[r][4] != 0) throw_touched(static_cast<int>(r), all[r][4]);
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
  gather_output_ = shard_pool::empty({group_->size() * flat_numel_}, gather_input_.options());
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

void ShardUnit::pre_forward(const std::vector<::torch::Tensor>& inputs) {
  // Each unit checks its own parameters and its step, before its gather.
  const bool becomes_root = forward_root == nullptr;
  const ShardUnit& checked_root = becomes_root ? *this : *forward_root;
  check_run(shard_check::Phase::kForward, checked_root,
            becomes_root ? calls_ + 1 : checked_root.calls_, &inputs);
  grad_forward_ = c10::GradMode::is_enabled();
  std::shared_ptr<ShardUnit> self = shared_from_this();
  if (becomes_root) {
    ++calls_;
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
