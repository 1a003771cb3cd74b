// What the module wrappers (DistributedDataParallel, fully_shard) share: the tensors in a
// forward's output, and the module a handle points to.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <tuple>
#include <utility>
#include <vector>

#include "tdist/error.h"

namespace tdist::torch::detail {

// The tensors in a forward output: a Tensor, and std::vector, std::tuple and std::pair of
// them, nested. Other types hold none that a wrapper can find.
inline void collect_tensors(const ::torch::Tensor& t, std::vector<::torch::Tensor>& out);
template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<::torch::Tensor>& out);
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<::torch::Tensor>& out);
template <typename... T>
void collect_tensors(const std::tuple<T...>& t, std::vector<::torch::Tensor>& out);
template <typename T>
void collect_tensors(const T&, std::vector<::torch::Tensor>&) {}

inline void collect_tensors(const ::torch::Tensor& t, std::vector<::torch::Tensor>& out) {
  if (t.defined()) out.push_back(t);
}
template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<::torch::Tensor>& out) {
  for (const T& x : v) collect_tensors(x, out);
}
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<::torch::Tensor>& out) {
  collect_tensors(p.first, out);
  collect_tensors(p.second, out);
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& t, std::vector<::torch::Tensor>& out) {
  std::apply([&out](const auto&... x) { (collect_tensors(x, out), ...); }, t);
}

// The module a handle (std::shared_ptr<M> or a torch::nn::ModuleHolder) points to;
// InvalidArgument naming `wrapper` for an empty one.
template <typename Handle>
::torch::nn::Module& module_of(Handle& handle, const char* wrapper) {
  if constexpr (requires { handle.is_empty(); }) {
    TDIST_CHECK(!handle.is_empty(), InvalidArgument, wrapper, ": empty module");
  } else {
    TDIST_CHECK(handle != nullptr, InvalidArgument, wrapper, ": null module");
  }
  return *handle;
}

}  // namespace tdist::torch::detail
