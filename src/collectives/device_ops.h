// DeviceOps: what the collective algorithms need to run on device memory — the reduction
// kernels, copies and scratch of one device, all ordered on one stream (the group's).
//
// A Ctx with memory == MemoryKind::kCuda carries one (context.h); the algorithms then post
// device messages (Comm::isend_device) and call these through detail.h's helpers instead
// of the CPU kernels (core/reduce_kernels.h), with the same meaning: premultiply(local) ->
// reduce_into(...)* -> finish(result). The calls enqueue work and return; work that reads
// a received buffer is ordered after its receive because receives complete on the host
// only once their device copy is done (the cuda_ipc channel), and sends are ordered after
// the work enqueued before them (their IPC event). Implemented by the cuda_ipc backend
// (src/backends/cuda_ipc). Thread-safety: one collective at a time (the group's worker).
// Failure: a CUDA error throws Error naming the call.
#pragma once

#include <cstddef>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::coll {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // Device scratch of at least `bytes` (uninitialised; kept for reuse by the owner).
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* data, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // dst = op(a, b) element-wise; dst may alias a or b exactly.
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                      ReduceOp op) = 0;
  virtual void premultiply(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size) = 0;
};

}  // namespace tdist::coll
