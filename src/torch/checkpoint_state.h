// checkpoint::State's entries (internal): each kind of entry says what it saves
// (snapshot) and where a load puts it (target).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tdist/torch/checkpoint.h"

namespace tdist::checkpoint {

using Saved = State::Saved;

struct State::Entry {
  virtual ~Entry() = default;
  virtual void snapshot(int rank, int world, Snapshot& out) const = 0;
  virtual void target(int rank, int world, const Saved& saved, LoadTarget& out) const = 0;
};

// The rows of the global tensor an entry covers on this rank: [first, first + count) of
// dim 0 (a scalar has one row). Replicated entries cover all rows.
struct RowRange {
  int64_t first = 0, count = 0;
};
RowRange rows_of(const TensorEntry& e);

// An optimizer's per-parameter state as tensors named as PyTorch names them
// (checkpoint_optim.cc). `param` is the tensor the optimizer holds, `name` its name in the
// checkpoint ("<prefix>.state.<param name>"), `like` the entry (shape, sharding) the state
// tensors follow.
struct OptimParam {
  ::torch::Tensor param;
  TensorEntry like;  // name: the parameter's name
};
void optimizer_snapshot(::torch::optim::Optimizer& opt, const std::vector<OptimParam>& params,
                        const std::string& prefix, State::Snapshot& out);
// Creates the state a checkpoint holds for a parameter where the optimizer has none yet.
void optimizer_target(::torch::optim::Optimizer& opt, const std::vector<OptimParam>& params,
                      const std::string& prefix, const State::Saved& saved, State::LoadTarget& out);

}  // namespace tdist::checkpoint
