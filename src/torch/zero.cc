// ZeroRedundancyOptimizer: construction (checks agreed by every rank, the partition, the
// local optimizer, the flat buffer), step and the parameter sync, state_bytes. The
// checkpoint calls are in zero_state.cc.
#include "tdist/torch/zero.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_set>
#include <utility>

#include "ddp_sync.h"
#include "tdist/bytes_collectives.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"
#include "zero_internal.h"

namespace tdist::torch {
namespace {

using ::torch::Tensor;

// What is wrong with this rank's parameters, or "".
std::string parameter_problem(const std::vector<Tensor>& params) {
  if (params.empty()) return "got an empty parameter list";
  const Tensor& first = params[0];
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    auto at = [i](auto&&... parts) {
      return ::tdist::detail::str_cat("parameter #", i, " ", parts...);
    };
    if (!p.defined()) return at("is an undefined tensor");
    if (p.layout() != ::torch::kStrided) return at("is not a dense tensor");
    if (!p.is_leaf()) return at("is not a leaf tensor (an optimizer cannot update it)");
    if (p.is_complex()) return at("is complex");
    if (!(p.device().is_cpu() || (TDIST_TORCH_CUDA && p.device().is_cuda()))) {
      return at("is on ", p.device(), "; tdist takes CPU", TDIST_TORCH_CUDA ? " and CUDA" : "",
                " tensors");
    }
    if (p.device() != first.device()) {
      return at("is on ", p.device(), " but parameter #0 is on ", first.device(),
                "; every parameter must be on one device");
    }
    if (p.scalar_type() != first.scalar_type()) {
      return at("is ", c10::toString(p.scalar_type()), " but parameter #0 is ",
                c10::toString(first.scalar_type()), "; every parameter must have one dtype");
    }
    try {
      (void)to_dtype(p.scalar_type());
    } catch (const InvalidArgument& e) {
      return at(": ", e.what());
    }
    if (!seen.insert(p.unsafeGetTensorImpl()).second) return at("is given twice");
  }
  return "";
}

// Torch's partition: largest first (stable), each to the lowest rank of smallest total.
// The indices each rank owns, in the order they were dealt.
std::vector<std::vector<size_t>> partition_parameters(const std::vector<Tensor>& params,
                                                      int world) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> totals(static_cast<size_t>(world), 0);
  std::vector<std::vector<size_t>> partition(static_cast<size_t>(world));
  for (size_t idx : order) {
    const auto r =
        static_cast<size_t>(std::min_element(totals.begin(), totals.end()) - totals.begin());
    partition[r].push_back(idx);
    totals[r] += params[idx].numel();
  }
  return partition;
}

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

int64_t param_state_bytes(const ::torch::optim::OptimizerParamState& state) {
  namespace optim = ::torch::optim;
  if (const auto* s = dynamic_cast<const optim::SGDParamState*>(&state)) {
    return bytes_of(s->momentum_buffer());
  }
  if (const auto* s = dynamic_cast<const optim::AdamParamState*>(&state)) {
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  }
  if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(&state)) {
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  }
  if (const auto* s = dynamic_cast<const optim::AdagradParamState*>(&state)) {
    return bytes_of(s->sum());
  }
  if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(&state)) {
    return bytes_of(s->square_avg()) + bytes_of(s->momentum_buffer()) + bytes_of(s->grad_avg());
  }
  // Any other state: its serialized size (tensor bytes plus a little framing).
  ::torch::serialize::OutputArchive archive;
  state.serialize(archive);
  int64_t total = 0;
  archive.save_to([&total](const void*, size_t n) {
    total += static_cast<int64_t>(n);
    return n;
  });
  return total;
}

}  // namespace

namespace zero_detail {

std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

void agree_on_problems(ProcessGroup& group, const std::string& mine) {
  if (group.size() == 1) {
    TDIST_CHECK(mine.empty(), InvalidArgument, "ZeroRedundancyOptimizer: ", mine);
    return;
  }
  const std::vector<std::string> all = all_gather_bytes(group, mine);
  for (size_t r = 0; r < all.size(); ++r) {
    TDIST_CHECK(all[r].empty(), InvalidArgument, "ZeroRedundancyOptimizer: rank ", r, ": ", all[r]);
  }
}

std::string optimizer_problem(const ::torch::optim::Optimizer* optimizer,
                              const std::vector<Tensor>& params) {
  if (optimizer == nullptr) return "the optimizer factory returned null";
  const auto& groups = optimizer->param_groups();
  if (groups.size() != 1) {
    return ::tdist::detail::str_cat("the optimizer factory made ", groups.size(),
                                    " parameter groups; it must make one, of the parameters "
                                    "it is given");
  }
  const std::vector<Tensor>& got = groups[0].params();
  bool same = got.size() == params.size();
  for (size_t i = 0; same && i < got.size(); ++i) {
    same = got[i].unsafeGetTensorImpl() == params[i].unsafeGetTensorImpl();
  }
  if (same) return "";
  return ::tdist::detail::str_cat("the optimizer factory was given ", params.size(),
                                  " parameters but made an optimizer of ", got.size(),
                                  " other ones; it must optimize exactly those it is given");
}

std::unique_ptr<::torch::optim::Optimizer> make_checked(const OptimizerFactory& factory,
                                                        const std::vector<Tensor>& params) {
  std::unique_ptr<::torch::optim::Optimizer> optimizer = factory(params);
  const std::string problem = optimizer_problem(optimizer.get(), params);
  TDIST_CHECK(problem.empty(), InvalidArgument, "ZeroRedundancyOptimizer: ", problem);
  return optimizer;
}

}  // namespace zero_detail

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> parameters,
                                                 OptimizerFactory factory, ZeroOptions options)
    : options_(std::move(options)),
      group_(options_.process_group != nullptr ? options_.process_group : get_default_group()),
      params_(std::move(parameters)),
      factory_(std::move(factory)) {
  TDIST_CHECK(group_ != nullptr, InvalidArgument,
              "ZeroRedundancyOptimizer: no process group given and none initialized");
  rank_ = group_->rank();
  world_ = group_->size();
  std::string problem = parameter_problem(params_);
  if (problem.empty() && !factory_) problem = "no optimizer factory given";
  zero_detail::agree_on_problems(*group_, problem);
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < params_.size(); ++i) {
    named.push_back({"parameter #" + std::to_string(i), params_[i]});
  }
  verify_same_shapes(*group_, named,
                     "ZeroRedundancyOptimizer: the ranks' parameter lists differ; they");

  partition_ = partition_parameters(params_, world_);
  owner_.assign(params_.size(), 0);
  for (size_t r = 0; r < partition_.size(); ++r) {
    int64_t elements = 0;
    for (size_t idx : partition_[r]) {
      owner_[idx] = static_cast<int>(r);
      elements += params_[idx].numel();
    }
    rank_elements_.push_back(elements);
  }
  block_ = *std::max_element(rank_elements_.begin(), rank_elements_.end());

  std::vector<Tensor> mine;
  for (size_t idx : partition_[static_cast<size_t>(rank_)]) mine.push_back(params_[idx]);
  problem.clear();
  try {
    local_ = factory_(mine);
    problem = zero_detail::optimizer_problem(local_.get(), mine);
  } catch (const std::exception& e) {
    problem = "the optimizer factory threw: " + zero_detail::error_text(e);
  }
  zero_detail::agree_on_problems(*group_, problem);

  sync_ = options_.param_sync == ParamSync::kAuto ? ParamSync::kBroadcast : options_.param_sync;
  if (options_.parameters_as_bucket_view) build_flat_buffer();
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::build_flat_buffer() {
  ::torch::NoGradGuard no_grad;
  flat_ = ::torch::zeros({world_ * block_}, params_[0].options().requires_grad(false));
  for (size_t r = 0; r < partition_.size(); ++r) {
    int64_t offset = static_cast<int64_t>(r) * block_;
    for (size_t idx : partition_[r]) {
      Tensor& p = params_[idx];
      Tensor view = flat_.narrow(0, offset, p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
      offset += p.numel();
    }
  }
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (Tensor& p : params_) {
    Tensor& grad = p.mutable_grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      grad.reset();
    } else {
      if (grad.grad_fn() != nullptr) {
        grad = grad.detach();
      } else {
        grad.requires_grad_(false);
      }
      grad.zero_();
    }
  }
}

Tensor ZeroRedundancyOptimizer::step(::torch::optim::Optimizer::LossClosure closure) {
  Tensor loss = local_->step(std::move(closure));
  if (world_ > 1 && block_ > 0) {
    ::torch::NoGradGuard no_grad;
    if (sync_ == ParamSync::kAllGather) {
      sync_all_gather();
    } else {
      sync_broadcast();
    }
  }
  return loss;
}

void ZeroRedundancyOptimizer::sync_broadcast() {
  std::vector<WorkPtr> works;
  for (size_t r = 0; r < partition_.size(); ++r) {
    const int src = static_cast<int>(r);
    if (flat_.defined()) {
      if (rank_elements_[r] == 0) continue;
      works.push_back(broadcast_async(
          flat_.narrow(0, static_cast<int64_t>(r) * block_, rank_elements_[r]), src, group_));
      continue;
    }
    for (size_t idx : partition_[r]) {
      works.push_back(broadcast_async(params_[idx].detach(), src, group_));
    }
  }
  for (const WorkPtr& w : works) w->wait();
}

void ZeroRedundancyOptimizer::sync_all_gather() {
  if (flat_.defined()) {
    all_gather_into_tensor(flat_, flat_.narrow(0, rank_ * block_, block_), group_);
    return;
  }
  Tensor out = ::torch::empty({world_ * block_}, params_[0].options().requires_grad(false));
  int64_t offset = rank_ * block_;
  for (size_t idx : partition_[static_cast<size_t>(rank_)]) {
    const Tensor& p = params_[idx];
    out.narrow(0, offset, p.numel()).view(p.sizes()).copy_(p.detach());
    offset += p.numel();
  }
  all_gather_into_tensor(out, out.narrow(0, rank_ * block_, block_), group_);
  for (size_t r = 0; r < partition_.size(); ++r) {
    if (static_cast<int>(r) == rank_) continue;
    offset = static_cast<int64_t>(r) * block_;
    for (size_t idx : partition_[r]) {
      const Tensor& p = params_[idx];
      p.detach().copy_(out.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

int ZeroRedundancyOptimizer::rank_of(size_t index) const {
  TDIST_CHECK(index < params_.size(), InvalidArgument, "ZeroRedundancyOptimizer::rank_of: index ",
              index, " is out of range (", params_.size(), " parameters)");
  return owner_[index];
}

int ZeroRedundancyOptimizer::rank_of(const Tensor& parameter) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return owner_[i];
  }
  TDIST_THROW(InvalidArgument,
              "ZeroRedundancyOptimizer::rank_of: the tensor is not one of the parameters");
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t total = 0;
  for (const auto& entry : local_->state()) {
    if (entry.second != nullptr) total += param_state_bytes(*entry.second);
  }
  return total;
}

}  // namespace tdist::torch
