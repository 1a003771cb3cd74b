// fully_shard's bad-input scenarios (issue 32, fully_shard.h's Errors), shared by the ranks
// as threads (fully_shard_errors_test.cc) and as processes under tdistrun
// (fully_shard_worker.cc, fully_shard_process_test.cc). Rank 1 is the odd one out; at
// world 3 ranks 0 and 2 agree. Each scenario must raise on every rank, with the error
// type and the message parts expected() names. Test-only.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/torch/fully_shard.h"

namespace tdist::torch::fully_shard_scenarios {

// Blocks of Linear + tanh (block0 6 -> 7, then 7 -> 7), then a head; `order` says which
// blocks a forward runs (through their units once wrapped).
struct Net : ::torch::nn::Module {
  Net() {
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(
          register_module("block" + std::to_string(i), ::torch::nn::Linear(i == 0 ? 6 : 7, 7)));
    }
    head = register_module("head", ::torch::nn::Linear(7, 3));
  }
  ::torch::Tensor forward(::torch::Tensor x) {
    for (int i : order) {
      const auto b = static_cast<size_t>(i);
      x = ::torch::tanh(units.empty() ? blocks[b](x) : units[b](x));
    }
    return head(x);
  }
  std::vector<::torch::nn::Linear> blocks;
  ::torch::nn::Linear head{nullptr};
  // By block index (the units wrapped, in the order a scenario wraps them).
  std::vector<FullyShardedModule<::torch::nn::Linear>> units;
  std::vector<int> order{0, 1, 2};
};

inline const std::vector<std::string>& names() {
  static const std::vector<std::string> all{
      "different_wrap", "wrap_order",     "forward_order",       "different_shapes",
      "skipped_unit",   "param_replaced", "optimizer_unsharded", "grads_before_wrap"};
  return all;
}

// Wraps the blocks in `wrap_order` (others not at all), then the whole net.
inline std::shared_ptr<FullyShardedModule<std::shared_ptr<Net>>> wrap(
    const std::shared_ptr<Net>& net, const std::shared_ptr<ProcessGroup>& group,
    const std::vector<int>& wrap_order) {
  FullyShardOptions options;
  options.process_group = group;
  std::vector<std::unique_ptr<FullyShardedModule<::torch::nn::Linear>>> made(3);
  for (int i : wrap_order) {
    made[static_cast<size_t>(i)] = std::make_unique<FullyShardedModule<::torch::nn::Linear>>(
        net->blocks[static_cast<size_t>(i)], options);
  }
  for (auto& m : made) {
    if (m != nullptr) net->units.push_back(std::move(*m));
  }
  return std::make_shared<FullyShardedModule<std::shared_ptr<Net>>>(net, options);
}

// One SGD step of the wrapped model on a batch of `batch` rows.
inline void step(FullyShardedModule<std::shared_ptr<Net>>& model, ::torch::optim::Optimizer& opt,
                 int64_t batch = 4) {
  opt.zero_grad();
  ::torch::Tensor x = ::torch::ones({batch, 6});
  model(x).sum().backward();
  opt.step();
}

// Runs scenario `name` as this rank of `group` (world >= 2): it should throw.
inline void run(const std::string& name, const std::shared_ptr<ProcessGroup>& group) {
  ::torch::manual_seed(0);
  const bool odd = group->rank() == 1;
  auto net = std::make_shared<Net>();
  if (name == "different_wrap") {  // rank 1 leaves block1 unwrapped
    wrap(net, group, odd ? std::vector<int>{0, 2} : std::vector<int>{0, 1, 2});
    return;
  }
  if (name == "wrap_order") {  // rank 1 wraps block2 before block1 (the same shapes)
    wrap(net, group, odd ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2});
    return;
  }
  if (name == "optimizer_unsharded") {  // an optimizer that stepped before wrapping
    ::torch::optim::Adam opt(net->parameters(), ::torch::optim::AdamOptions(0.01));
    net->forward(::torch::ones({4, 6})).sum().backward();
    opt.step();
    auto model = wrap(net, group, {0, 1, 2});
    model->check_optimizer(opt);
    return;
  }
  if (name == "grads_before_wrap") {  // whole gradients left from before wrapping
    net->forward(::torch::ones({4, 6})).sum().backward();
    auto model = wrap(net, group, {0, 1, 2});
    (*model)(::torch::ones({4, 6}));
    return;
  }
  auto model = wrap(net, group, {0, 1, 2});
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.1));
  step(*model, opt);  // in step: the root has learned the order (prefetching from here on)
  if (name == "forward_order") {
    if (odd) net->order = {0, 2, 1};
    step(*model, opt);
  } else if (name == "different_shapes") {
    step(*model, opt, odd ? 5 : 4);
  } else if (name == "skipped_unit") {
    if (odd) net->order = {0, 1};
    step(*model, opt);
  } else if (name == "param_replaced") {
    if (odd) {
      ::torch::NoGradGuard no_grad;
      net->blocks[2]->weight.set_data(net->blocks[2]->weight.detach().clone());  // same shape
    }
    step(*model, opt);
  }
}

struct Expected {
  std::string type;                // "DesyncError" or "InvalidArgument"
  std::vector<std::string> parts;  // in the message
};

// What rank `rank` of `world` must raise in scenario `name`.
inline Expected expected(const std::string& name, int rank) {
  if (name == "different_wrap") {
    return {"DesyncError",
            {"wrapping is out of step", "rank 0 wraps a Linear with parameters 'weight' [7, 7]",
             "where rank 1 wraps a Net with the units 'block0', 'block2' inside"}};
  }
  if (name == "wrap_order") {
    return {"DesyncError",
            {"wrapping is out of step",
             "rank 0 wraps a Net with the units 'block0', "
             "'block1', 'block2' inside",
             "rank 1 wraps a Net with the units 'block0', "
             "'block2', 'block1' inside"}};
  }
  if (name == "forward_order") {
    return {"DesyncError",
            {"out of step", "rank 0 runs unit 'block1' forward with input [4, 7]",
             "where rank 1 runs unit 'block2' forward with input [4, 7]"}};
  }
  if (name == "different_shapes") {
    return {"DesyncError",
            {"out of step", "rank 0 runs the unit of Net forward with input [4, 6]",
             "where rank 1 runs the unit of Net forward with input [5, 6]"}};
  }
  if (name == "skipped_unit") {
    return {"DesyncError",
            {"out of step", "rank 0 runs unit 'block2' forward with input [4, 7]",
             "where rank 1 runs the unit of Net backward"}};
  }
  if (name == "param_replaced") {
    if (rank == 1) return {"InvalidArgument", {"parameter 'block2.weight' was replaced"}};
    return {"InvalidArgument", {"parameter 'block2.weight' of rank 1 was replaced"}};
  }
  if (name == "grads_before_wrap") {
    return {"InvalidArgument",
            {"parameter 'head.weight' has a gradient of shape [3, 7] but its shard is",
             "zero the gradients"}};
  }
  // optimizer_unsharded
  return {"InvalidArgument",
          {"state 'exp_avg' of parameter 'block0.weight' has shape [7, 6]",
           "the optimizer stepped before fully_shard"}};
}

// "" when `type` and `message` are what `rank` must raise in `name`, else why not.
inline std::string check(const std::string& name, int rank, const std::string& type,
                         const std::string& message) {
  const Expected e = expected(name, rank);
  if (type != e.type) return "expected " + e.type + ", got " + type + ": " + message;
  for (const std::string& part : e.parts) {
    if (message.find(part) == std::string::npos) {
      return "\"" + part + "\" not in \"" + message + "\"";
    }
  }
  return "";
}

}  // namespace tdist::torch::fully_shard_scenarios
