// Staging of tensors for the process group's raw-pointer calls, and the Work that ends a
// tensor operation (internal to tdist_torch; collectives.h states what users see).
//
// A process group reads and writes dense row-major buffers. The stage_* functions return
// such a buffer for a tensor, either the tensor's own memory or a temporary, and record in
// a Staging every tensor the operation's pointers point into and the copies from
// temporaries into the caller's tensors to make once it succeeded. launch() wraps the
// group's Work in one that completes after that copy-back.
//
// Ownership: the returned Work owns the Staging, so the buffers live until the operation
// completed; a Work dropped before that hands them to a process-wide list (pruned at each
// launch(), never destroyed) so that the operation never writes into freed memory.
// Thread-safety: a Staging belongs to the one thread that builds it; the Work may be shared,
// and the copy-back runs once, inside whichever wait() or is_completed() first sees the
// operation complete. Failures: staging an output whose elements may share memory throws
// InvalidArgument; an error of the operation or of the copy-back becomes the Work's error
// (nothing is copied back after a failed operation).
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/work.h"

namespace tdist::torch {

// The CUDA side of one call on CUDA tensors (cuda_work.cc): its streams and events. Opaque
// here; null for CPU tensors.
struct CudaCall;

// How a call's buffers reach the group: CPU tensors as they are (kHost); CUDA tensors as
// device buffers to a group that takes them (kDevice: `nccl`), or through pinned host
// buffers to a host-only group (kStaged: tcp, shm, auto, mpi).
enum class StageMode { kHost, kDevice, kStaged };

// Every buffer an operation's raw pointers point into, and the copies into the caller's
// tensors to make once it succeeded.
struct Staging {
  std::vector<::torch::Tensor> keep;
  std::vector<std::pair<::torch::Tensor, ::torch::Tensor>> copy_back;  // (caller's, result)
  StageMode mode = StageMode::kHost;
  c10::Device device{c10::kCPU};   // the tensors' device
  std::shared_ptr<CudaCall> cuda;  // kDevice and kStaged
};

// The Staging of call `op` on `group` over `tensors` (every tensor of the call, defined
// ones checked by the caller): kHost for CPU tensors. InvalidArgument, naming `op`, the
// tensors and their devices, when the tensors are on different devices, on a device other
// than the CPU or CUDA (or CUDA without a LibTorch built with it), or are CPU tensors for
// a group that takes device memory only. For CUDA tensors it starts the call's CUDA side
// (kStaged: torch's current stream becomes a side stream that waits for the caller's,
// until launch() returns).
Staging open_staging(const char* op, const ProcessGroup& group,
                     const std::vector<const ::torch::Tensor*>& tensors);

// Whether the operation cannot use `t`'s own memory: its elements in memory are not its
// values in row-major order, or it lives on a device the group does not take (kStaged).
bool needs_staging(const Staging& s, const ::torch::Tensor& t);

// A buffer holding `t`'s values the operation may read.
const void* stage_input(Staging& s, const ::torch::Tensor& t);

// As stage_input, copying `t` when it shares memory with [out, out + out_bytes), which
// the operation writes.
const void* stage_input_apart(Staging& s, const ::torch::Tensor& t, const void* out,
                              size_t out_bytes);

// One buffer holding a list of inputs' values back to back.
const void* stage_inputs(Staging& s, const std::vector<::torch::Tensor>& inputs,
                         c10::ScalarType type);

// A buffer the operation may write `t`'s result into (starting with t's values when
// `keep_values`); copied into `t` on success when it is not `t` itself. `op` and `what`
// name the operation and the argument in the InvalidArgument for an overlapping `t`.
void* stage_output(Staging& s, const char* op, const char* what, const ::torch::Tensor& t,
                   bool keep_values);

// One buffer for a list of outputs, back to back; block i is copied into outputs[i].
void* stage_outputs(Staging& s, const char* op, const char* what,
                    const std::vector<::torch::Tensor>& outputs, c10::ScalarType type);

// The Work of operation `op`: `issue` starts it on the group (over the staged buffers) and
// returns the group's Work; the returned Work completes when that one does, after the
// copy-back when it succeeded. CUDA tensors (cuda_work.h): the call is ordered after the
// work queued on torch's current stream, and the Work has torch's semantics (wait(): the
// caller's current stream waits; synchronize(): the host waits). Inside a CallerWaits
// scope (collectives.h), CPU tensors: waits for the group's Work itself, copies back, and
// returns that Work, complete (a failure is thrown from here).
WorkPtr launch(const char* op, Staging staging, const std::function<WorkPtr()>& issue);

// Unfinished operations whose Work was dropped: `finished` says when it is done, and
// `keep` (with what `finished` holds) lives until then. Pruned at each launch().
void adopt_orphan(std::function<bool()> finished, std::vector<::torch::Tensor> keep);

}  // namespace tdist::torch
