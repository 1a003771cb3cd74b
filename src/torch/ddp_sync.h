// Collective helpers of DistributedDataParallel's construction and forward and of Join
// (internal): checking that every rank has the same tensor shapes, copying root's tensors
// to all ranks in a few large broadcasts, reducing a few flags, and explaining
// communication errors. The first three are collective over the group and block until
// done; communication failures propagate (PeerError, TimeoutError, DesyncError).
// Thread-safety: as the group's collectives.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/error.h"
#include "tdist/process_group.h"
#include "tdist/reduce_op.h"

namespace tdist::torch {

struct NamedTensor {
  std::string name;  // full module path, e.g. "fc2.weight"
  ::torch::Tensor tensor;
};

// Compares every rank's list of (dtype, shape) with rank 0's. On any difference every rank
// throws InvalidArgument listing the first few, by the names of this rank's `tensors`:
// "<subject> must have the same shapes and dtypes on every rank. First differences: ...".
void verify_same_shapes(
    ProcessGroup& group, const std::vector<NamedTensor>& tensors,
    std::string_view subject = "DDP: the ranks' models differ; parameters and buffers");

// Copies root's values of `tensors` (CPU, dense) into the other ranks' tensors, packing
// tensors of one dtype into flat buffers of at most a few tens of MB per broadcast.
void broadcast_coalesced(ProcessGroup& group, const std::vector<::torch::Tensor>& tensors,
                         int root);

// Element-wise `op` over every rank's `values` (a few int64, e.g. flags and counts), in
// place, blocking until done: on the host, or through a tensor on `device` for a group
// that takes device memory only.
void all_reduce_values(ProcessGroup& group, std::vector<int64_t>& values, ReduceOpKind op,
                       c10::Device device);

// TimeoutError, PeerError or DesyncError: the ranks could not complete a collective.
bool is_communication_error(const Error& e);

// Rethrows `error` as the same tdist type (Error and its subclasses) with `context` in
// front of its message; other exceptions unchanged.
[[noreturn]] void rethrow_with_context(std::exception_ptr error, const std::string& context);

}  // namespace tdist::torch
