// The all_reduce of a flat gradient tensor for the comm hooks (internal to tdist_torch).
#pragma once

#include <torch/types.h>

#include "tdist/process_group.h"
#include "tdist/reduce_op.h"
#include "tdist/work.h"

namespace tdist::torch {

// all_reduce of `t` (contiguous) over `group`, in place: the group's own call on a CPU
// tensor, the tensor collective (collectives.h: staging or device pointers, torch's stream
// semantics) on a CUDA one.
WorkPtr all_reduce_flat(ProcessGroup& group, const ::torch::Tensor& t, ReduceOp op);

}  // namespace tdist::torch
