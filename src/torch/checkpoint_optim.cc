// An optimizer's per-parameter state in a checkpoint (checkpoint_state.h): the tensors of
// LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop states, named as PyTorch's
// get_optimizer_state_dict names them ("<prefix>.state.<param>.<key>"), each sharded as its
// parameter is; the step counter as a 0-d int64 tensor, replicated.
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_state.h"
#include "compat.h"
#include "tdist/error.h"

namespace tdist::checkpoint {
namespace {

using ::torch::optim::OptimizerParamState;

OptimizerParamState* state_of(::torch::optim::Optimizer& opt, const ::torch::Tensor& p) {
  auto it = opt.state().find(tdist::torch::compat::optimizer_state_key(p));
  return it == opt.state().end() ? nullptr : it->second.get();
}

// A state type's tensors by PyTorch's names, with their setters, and its step counter.
struct Field {
  const char* key;
  ::torch::Tensor (*get)(OptimizerParamState&);
  void (*set)(OptimizerParamState&, ::torch::Tensor);
};
struct Kind {
  std::vector<Field> fields;
  bool has_step = false;
  int64_t (*get_step)(OptimizerParamState&) = nullptr;
  void (*set_step)(OptimizerParamState&, int64_t) = nullptr;
  std::unique_ptr<OptimizerParamState> (*make)() = nullptr;
};

#define TDIST_FIELD(Type, name)                                                                   \
  Field {                                                                                         \
#name,                                                                                        \
        [](OptimizerParamState &                                                                  \
           s) { return static_cast<Type&>(s).name(); },                                           \
                                                     [](OptimizerParamState & s,                  \
                                                        ::torch::Tensor                           \
                                                            t) { static_cast<Type&>(s).name(t); } \
  }
#define TDIST_STEP(Type)                                                     \
  true, [](OptimizerParamState& s) { return static_cast<Type&>(s).step(); }, \
      [](OptimizerParamState& s, int64_t v) { static_cast<Type&>(s).step(v); }

template <typename T>
std::unique_ptr<OptimizerParamState> make_state() {
  return std::make_unique<T>();
}

// The kind of `opt`'s states; InvalidArgument for an optimizer tdist does not know.
Kind kind_of(const ::torch::optim::Optimizer& opt) {
  using namespace ::torch::optim;  // NOLINT(google-build-using-namespace)
  if (dynamic_cast<const SGD*>(&opt)) {
    return {{TDIST_FIELD(SGDParamState, momentum_buffer)},
            false,
            nullptr,
            nullptr,
            make_state<SGDParamState>};
  }
  if (dynamic_cast<const AdamW*>(&opt)) {
    return {{TDIST_FIELD(AdamWParamState, exp_avg), TDIST_FIELD(AdamWParamState, exp_avg_sq),
             TDIST_FIELD(AdamWParamState, max_exp_avg_sq)},
            TDIST_STEP(AdamWParamState),
            make_state<AdamWParamState>};
  }
  if (dynamic_cast<const Adam*>(&opt)) {
    return {{TDIST_FIELD(AdamParamState, exp_avg), TDIST_FIELD(AdamParamState, exp_avg_sq),
             TDIST_FIELD(AdamParamState, max_exp_avg_sq)},
            TDIST_STEP(AdamParamState),
            make_state<AdamParamState>};
  }
  if (dynamic_cast<const Adagrad*>(&opt)) {
    return {{TDIST_FIELD(AdagradParamState, sum)},
            TDIST_STEP(AdagradParamState),
            make_state<AdagradParamState>};
  }
  if (dynamic_cast<const RMSprop*>(&opt)) {
    return {
        {TDIST_FIELD(RMSpropParamState, square_avg),
         TDIST_FIELD(RMSpropParamState, momentum_buffer), TDIST_FIELD(RMSpropParamState, grad_avg)},
        TDIST_STEP(RMSpropParamState),
        make_state<RMSpropParamState>};
  }
  TDIST_THROW(InvalidArgument,
              "checkpoint: the optimizer is none of SGD, Adam, AdamW, Adagrad, RMSprop, whose "
              "state tdist knows; save its tensors with State::tensor/shard");
}
#undef TDIST_FIELD
#undef TDIST_STEP

TensorEntry follow(const TensorEntry& like, std::string name, ::torch::Tensor data) {
  TensorEntry e = like;
  e.name = std::move(name);
  e.data = std::move(data);
  return e;
}

TensorEntry step_entry(std::string name, ::torch::Tensor data) {
  return {std::move(name), std::move(data), {}, 0, true};
}

}  // namespace

void optimizer_snapshot(::torch::optim::Optimizer& opt, const std::vector<OptimParam>& params,
                        const std::string& prefix, State::Snapshot& out) {
  const Kind kind = kind_of(opt);
  for (const OptimParam& p : params) {
    OptimizerParamState* s = state_of(opt, p.param);
    if (s == nullptr) continue;
    const std::string base = prefix + "state." + p.like.name + ".";
    if (kind.has_step) {
      out.tensors.push_back(
          step_entry(base + "step", ::torch::tensor(kind.get_step(*s), ::torch::kInt64)));
    }
    for (const Field& f : kind.fields) {
      ::torch::Tensor t = f.get(*s);
      if (t.defined()) out.tensors.push_back(follow(p.like, base + f.key, t));
    }
  }
}

void optimizer_target(::torch::optim::Optimizer& opt, const std::vector<OptimParam>& params,
                      const std::string& prefix, const State::Saved& saved,
                      State::LoadTarget& out) {
  const Kind kind = kind_of(opt);
  for (const OptimParam& p : params) {
    const std::string base = prefix + "state." + p.like.name + ".";
    // The checkpoint has state for this parameter when it has any of the kind's tensors.
    std::vector<const Field*> present;
    for (const Field& f : kind.fields) {
      if (saved.has(base + f.key)) present.push_back(&f);
    }
    if (present.empty()) continue;
    // Nothing changes before apply(): a state the optimizer lacks, or a tensor missing from
    // it, is filled in fresh tensors and put in place only then.
    OptimizerParamState* live = state_of(opt, p.param);
    std::vector<std::pair<Field, ::torch::Tensor>> fresh;
    for (const Field* f : present) {
      ::torch::Tensor t = live != nullptr ? f->get(*live) : ::torch::Tensor();
      if (!t.defined() || t.sizes() != p.param.sizes()) {
        t = ::torch::zeros_like(p.param, ::torch::MemoryFormat::Preserve);
        fresh.emplace_back(*f, t);
      }
      out.tensors.push_back(follow(p.like, base + f->key, t));
    }
    ::torch::Tensor step;
    if (kind.has_step) {
      step = ::torch::zeros({}, ::torch::kInt64);
      out.tensors.push_back(step_entry(base + "step", step));
    }
    ::torch::optim::Optimizer* o = &opt;
    ::torch::Tensor param = p.param;
    out.apply.push_back([o, param, kind, fresh, step] {
      OptimizerParamState* s = state_of(*o, param);
      if (s == nullptr) {
        auto made = kind.make();
        s = made.get();
        o->state()[tdist::torch::compat::optimizer_state_key(param)] = std::move(made);
      }
      for (const auto& [f, t] : fresh) f.set(*s, t);
      if (step.defined()) kind.set_step(*s, step.item<int64_t>());
    });
  }
}

}  // namespace tdist::checkpoint
