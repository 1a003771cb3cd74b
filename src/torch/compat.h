// The one place where tdist_torch meets what differs between the LibTorch versions it
// supports: Debian's 1.13 and PyPI's 2.x (tested: 2.15.0). Everything else in src/torch,
// include/tdist/torch, the tests and the examples is written once for both.
//
// - Autograd nodes: LibTorch 1.13 holds them by std::shared_ptr<Node>, 2.x by
//   c10::intrusive_ptr<Node> (grad_accumulator, try_get_grad_accumulator, Tensor::grad_fn,
//   Edge::function). NodePtr is whatever the installed LibTorch returns; both offer get(),
//   comparison with nullptr and ->.
// - Optimizer state: torch::optim::Optimizer::state() is keyed by the parameter's
//   TensorImpl address as text in 1.13 (c10::guts::to_string) and by the address itself
//   in 2.x; optimizer_state_key(param) gives the installed LibTorch's key.
//
// Internal LibTorch headers, named here once: the Reducer needs a node's post hooks
// (Node::add_post_hook, del_post_hook), a leaf's gradient accumulator
// (impl::grad_accumulator, impl::try_get_grad_accumulator) and the graph's edges
// (Node::next_edges); the public C++ API has none of them. PyTorch's own Reducer uses the
// same ones.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace tdist::torch::compat {

using NodePtr = decltype(::torch::autograd::impl::grad_accumulator(
    std::declval<const ::torch::autograd::Variable&>()));

static_assert(
    std::is_same_v<std::decay_t<decltype(std::declval<const ::torch::Tensor&>().grad_fn())>,
                   NodePtr>,
    "grad_fn() and grad_accumulator() hold autograd nodes by the same pointer type");
static_assert(std::is_same_v<decltype(::torch::autograd::Edge::function), NodePtr>,
              "Edge::function holds its node like grad_accumulator() does");

using OptimizerStateKey =
    typename std::decay_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>::key_type;

// A template so that only the installed LibTorch's branch is compiled.
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const ::torch::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string writes for a pointer
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return text.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace tdist::torch::compat
