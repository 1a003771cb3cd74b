// ZeroRedundancyOptimizer's checkpoints: consolidate_state_dict gathers each rank's local
// optimizer, serialized as torch::save writes it, on the target rank, which loads each
// into an optimizer of that rank's parameters and moves the states into one optimizer of
// every parameter; load_state_dict takes this rank's share of such a full optimizer.
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>
#include <typeinfo>
#include <utility>

#include "compat.h"
#include "tdist/bytes_collectives.h"
#include "tdist/error.h"
#include "tdist/torch/zero.h"
#include "zero_internal.h"

namespace tdist::torch {
namespace {

using ::torch::Tensor;
using ::torch::optim::Optimizer;

std::string serialize(const Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

void deserialize(Optimizer& optimizer, const std::string& bytes) {
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  optimizer.load(archive);
}

std::string type_name(const Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

}  // namespace

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  TDIST_CHECK(to >= 0 && to < world_, InvalidArgument,
              "ZeroRedundancyOptimizer::consolidate_state_dict: rank ", to,
              " is not in the group (size ", world_, ")");
  consolidated_.reset();
  std::vector<std::string> states;
  if (world_ == 1) {
    states.push_back(serialize(*local_));
  } else {
    states = gather_bytes(*group_, serialize(*local_), to);
  }
  if (rank_ != to) return;
  std::unique_ptr<Optimizer> full = zero_detail::make_checked(factory_, params_);
  full->param_groups()[0].set_options(local_->param_groups()[0].options().clone());
  for (size_t r = 0; r < partition_.size(); ++r) {
    std::vector<Tensor> owned;
    for (size_t idx : partition_[r]) owned.push_back(params_[idx]);
    std::unique_ptr<Optimizer> part = zero_detail::make_checked(factory_, owned);
    deserialize(*part, states[r]);
    std::string().swap(states[r]);  // its memory back before the next rank's
    // `part` and `full` hold the same tensors, so the states keep their keys.
    for (auto& entry : part->state()) full->state()[entry.first] = std::move(entry.second);
  }
  consolidated_ = std::move(full);
}

const Optimizer& ZeroRedundancyOptimizer::state_dict() const {
  TDIST_CHECK(consolidated_ != nullptr, Error,
              "ZeroRedundancyOptimizer::state_dict: the state was not consolidated on rank ", rank_,
              "; call consolidate_state_dict(", rank_, ") on every rank first");
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state_dict(const Optimizer& full) {
  const char* what = "ZeroRedundancyOptimizer::load_state_dict: ";
  const Optimizer& local = *local_;
  TDIST_CHECK(typeid(full) == typeid(local), InvalidArgument, what, "the state is a ",
              type_name(full), " but the factory makes a ", type_name(local));
  TDIST_CHECK(full.param_groups().size() == 1, InvalidArgument, what, "the state has ",
              full.param_groups().size(), " parameter groups; it must have one");
  const std::vector<Tensor>& theirs = full.param_groups()[0].params();
  TDIST_CHECK(theirs.size() == params_.size(), InvalidArgument, what, "the state is of ",
              theirs.size(), " parameters, this optimizer has ", params_.size());
  for (size_t i = 0; i < theirs.size(); ++i) {
    TDIST_CHECK(theirs[i].sizes() == params_[i].sizes() &&
                    theirs[i].scalar_type() == params_[i].scalar_type(),
                InvalidArgument, what, "parameter #", i, " is ",
                c10::toString(theirs[i].scalar_type()), theirs[i].sizes(), " in the state but ",
                c10::toString(params_[i].scalar_type()), params_[i].sizes(), " here");
  }
  auto& state = local_->state();
  for (size_t idx : partition_[static_cast<size_t>(rank_)]) {
    const auto key = compat::optimizer_state_key(params_[idx]);
    const auto it = full.state().find(compat::optimizer_state_key(theirs[idx]));
    if (it == full.state().end() || it->second == nullptr) {
      state.erase(key);
    } else {
      state[key] = it->second->clone();
    }
  }
  local_->param_groups()[0].set_options(full.param_groups()[0].options().clone());
}

void ZeroRedundancyOptimizer::load_state_dict(::torch::serialize::InputArchive& archive) {
  std::unique_ptr<Optimizer> full = zero_detail::make_checked(factory_, params_);
  try {
    full->load(archive);
  } catch (const c10::Error& e) {
    TDIST_THROW(InvalidArgument,
                "ZeroRedundancyOptimizer::load_state_dict: the archive does not fit this "
                "optimizer: ",
                zero_detail::error_text(e));
  }
  load_state_dict(*full);
}

}  // namespace tdist::torch
