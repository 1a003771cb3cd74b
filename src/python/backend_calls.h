// What every file of TdistBackend (backend.h) uses to turn one of torch's calls into
// tdist's: the reduce op, the one entry of a per-rank list, the call's options (does the
// caller wait at once, its timeout) and TDIST_ISSUE. Internal to the Python extension.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "backend.h"
#include "python_call_site.h"
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include "tdist/error.h"
#include "tdist/reduce_op.h"
#include "tdist/torch/collectives.h"
#include "torch_work.h"

namespace tdist::python {

// torch's reduce op as tdist's; InvalidArgument for one tdist does not have.
ReduceOp to_reduce_op(const ::c10d::ReduceOp& op);

// The one entry of a per-rank list (torch.distributed's functions pass one).
template <typename T>
T& single(std::vector<T>& list, const char* op, const char* what) {
  if (list.size() != 1) {
    TDIST_THROW(InvalidArgument, op, ": tdist takes exactly one ", what, " per call, got ",
                list.size());
  }
  return list[0];
}

// Whether the caller waits for the operation right away (async_op=False: torch 2.x tells
// through the options); then the calling thread runs it at once, with no hand-off to the
// group's worker thread.
template <typename Opts>
bool caller_waits(const Opts& opts) {
  if constexpr (requires { opts.asyncOp; }) {
    return !opts.asyncOp;
  } else {
    return false;
  }
}

// Whether torch keeps each call's Work for a compiled graph to wait on
// (allow_inflight_collective_as_graph_input): then every call returns one.
inline bool work_registered() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
  return ::c10d::allow_inflight_collective_as_graph_input();
#else
  return false;
#endif
}

// The call's own timeout (kUnsetTimeout when it has none).
template <typename Opts>
std::chrono::milliseconds timeout_option(const Opts& opts) {
  if constexpr (requires { opts.timeout; }) {
    return opts.timeout;
  } else {
    return ::c10d::kUnsetTimeout;
  }
}

}  // namespace tdist::python

// In a TdistBackend member with `opts` in scope: runs the statements (which push_back the
// tdist Works of the call onto `works`) on the caller's thread (inside a CallerWaits scope
// when the call may finish there: finishes_in_call), errors as torch's, and
// returns the TorchWork over them, whose result() is `outputs` (and whose profiler event
// shows `inputs`; TDIST_ISSUE: the outputs, for in-place calls).
#define TDIST_ISSUE_IN(type, inputs, outputs, ...)                           \
  ::tdist::python::torch_errors([&] {                                        \
    const bool run_now = ::tdist::python::caller_waits(opts);                \
    const auto timeout = ::tdist::python::timeout_option(opts);              \
    const bool in_call = finishes_in_call(run_now, timeout);                 \
    std::vector<::tdist::WorkPtr> works;                                     \
    {                                                                        \
      const ::tdist::python::PythonCallSite call_site(*group());             \
      std::optional<::tdist::torch::CallerWaits> waits;                      \
      if (in_call) waits.emplace();                                          \
      __VA_ARGS__;                                                           \
    }                                                                        \
    if (in_call && !::tdist::python::work_registered()) {                    \
      return finished(type, works);                                          \
    }                                                                        \
    const std::vector<at::Tensor>& shown = inputs;                           \
    return issue(type, std::move(works), outputs, run_now, timeout, &shown); \
  })
#define TDIST_ISSUE(type, outputs, ...) TDIST_ISSUE_IN(type, outputs, outputs, __VA_ARGS__)
