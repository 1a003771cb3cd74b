// The Reducer's search for parameters a backward pass will not reach: a walk of the
// autograd graph from forward's outputs. A parameter whose gradient accumulator the walk
// never meets gets no gradient from a backward of these outputs.
// Walking the graph needs LibTorch internals (Node::next_edges, a leaf's accumulator),
// included through compat.h; PyTorch's Reducer walks it the same way.
#include <unordered_set>

#include "compat.h"
#include "reducer.h"

namespace tdist::torch {

std::vector<size_t> Reducer::search_unused_locked(
    const std::vector<::torch::Tensor>& outputs) const {
  using ::torch::autograd::Node;
  std::unordered_set<const Node*> seen;
  std::vector<Node*> stack;
  auto visit = [&](const compat::NodePtr& node) {
    if (node != nullptr && seen.insert(node.get()).second) stack.push_back(node.get());
  };
  for (const ::torch::Tensor& t : outputs) {
    if (!t.requires_grad()) continue;
    // A leaf output (a parameter returned as is) has no grad_fn, only its accumulator.
    visit(t.grad_fn() != nullptr ? t.grad_fn()
                                 : ::torch::autograd::impl::try_get_grad_accumulator(t));
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const ::torch::autograd::Edge& edge : node->next_edges()) visit(edge.function);
  }
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (seen.count(params_[i].grad_accumulator.get()) == 0) unused.push_back(i);
  }
  return unused;
}

}  // namespace tdist::torch
