// FullyShardedBase::check_optimizer (fully_shard.h): an optimizer must hold the units'
// shards, and any state it has must be shaped as the shards.
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shard_unit.h"
#include "tdist/error.h"
#include "tdist/torch/fully_shard.h"

namespace tdist::torch {
namespace {

// The optimizer's state of `p`: keyed by the TensorImpl's address as text in LibTorch 1.x
// (as c10::guts::to_string writes it), by the address itself in 2.x.
template <typename Map>
const ::torch::optim::OptimizerParamState* state_of(const Map& state, const ::torch::Tensor& p) {
  typename Map::const_iterator it;
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    it = state.find(key.str());
  } else {
    it = state.find(p.unsafeGetTensorImpl());
  }
  return it == state.end() ? nullptr : it->second.get();
}

// The per-parameter tensors of the optimizers fully_shard knows, by name.
std::vector<std::pair<const char*, ::torch::Tensor>> state_tensors(
    const ::torch::optim::OptimizerParamState& s) {
  using ::torch::optim::AdagradParamState, ::torch::optim::AdamParamState,
      ::torch::optim::AdamWParamState, ::torch::optim::RMSpropParamState,
      ::torch::optim::SGDParamState;
  if (const auto* sgd = dynamic_cast<const SGDParamState*>(&s)) {
    return {{"momentum_buffer", sgd->momentum_buffer()}};
  }
  if (const auto* adam = dynamic_cast<const AdamParamState*>(&s)) {
    return {{"exp_avg", adam->exp_avg()},
            {"exp_avg_sq", adam->exp_avg_sq()},
            {"max_exp_avg_sq", adam->max_exp_avg_sq()}};
  }
  if (const auto* adamw = dynamic_cast<const AdamWParamState*>(&s)) {
    return {{"exp_avg", adamw->exp_avg()},
            {"exp_avg_sq", adamw->exp_avg_sq()},
            {"max_exp_avg_sq", adamw->max_exp_avg_sq()}};
  }
  if (const auto* adagrad = dynamic_cast<const AdagradParamState*>(&s)) {
    return {{"sum", adagrad->sum()}};
  }
  if (const auto* rms = dynamic_cast<const RMSpropParamState*>(&s)) {
    return {{"square_avg", rms->square_avg()},
            {"momentum_buffer", rms->momentum_buffer()},
            {"grad_avg", rms->grad_avg()}};
  }
  return {};
}

}  // namespace

void FullyShardedBase::check_optimizer(const ::torch::optim::Optimizer& optimizer) const {
  const ShardUnit& unit = *unit_;
  const std::vector<const ShardParam*> params = unit.all_params();
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<::torch::Tensor>& tensors = groups[g].params();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const ::torch::Tensor& t = tensors[i];
      const ShardParam* found = nullptr;
      for (const ShardParam* p : params) {
        if (p->param().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) found = p;
      }
      if (found == nullptr) {
        // A parameter of the model that no unit holds, or a tensor of something else.
        std::string name;
        for (const auto& item : unit.module().named_parameters()) {
          if (item.value().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) name = item.key();
        }
        TDIST_CHECK(!name.empty(), InvalidArgument, "fully_shard: the optimizer's parameter ", i,
                    " of param group ", g, " (", t.sizes(), " ", t.scalar_type(),
                    ") is not a parameter of this model but of another (a copy of the model, "
                    "or one not wrapped): build the optimizer on the wrapped model's parameters");
        TDIST_THROW(InvalidArgument, "fully_shard: the optimizer's parameter '", name, "' (",
                    t.sizes(),
                    ") is not sharded: no fully_shard unit holds it (registered after "
                    "wrapping?); wrap its module, or the whole model");
      }
      const std::string name = unit.prefix_of(found) + found->name();
      TDIST_CHECK(!found->is_sharded() || found->holds_shard(), InvalidArgument,
                  "fully_shard: the optimizer's parameter '", name, "' is ", t.sizes(),
                  " but should be this rank's shard ", found->shard().sizes(),
                  " (it was replaced or resized outside fully_shard)");
      const ::torch::optim::OptimizerParamState* state = state_of(optimizer.state(), t);
      if (state == nullptr) continue;
      for (const auto& [what, s] : state_tensors(*state)) {
        TDIST_CHECK(!s.defined() || s.sizes() == found->shard().sizes(), InvalidArgument,
                    "fully_shard: the optimizer's state '", what, "' of parameter '", name,
                    "' has shape ", s.sizes(), " where this rank's shard is ",
                    found->shard().sizes(),
                    s.sizes().vec() == found->global_shape()
                        ? " (the whole parameter's: the optimizer stepped before fully_shard "
                          "sharded it; build the optimizer, or load its state, after wrapping)"
                        : "");
      }
    }
  }
}

}  // namespace tdist::torch
