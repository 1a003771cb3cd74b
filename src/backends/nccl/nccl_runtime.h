// The nccl backend's pieces that need no GPU: tdist's dtypes and reduce ops as NCCL's, and
// the translation of NCCL status codes into tdist exceptions (the device choice and CUDA's
// codes: cuda/runtime.h). Internal to tdist (not installed).
//
// Dtypes: every tdist dtype has an NCCL type; bool travels as uint8 (one byte, 0 or 1).
// Reduce ops: sum, prod, min, max and avg map to NCCL's (avg: NCCL divides integers
// truncating, as tdist does, and multiplies floats by 1/world before summing); on bool,
// sum and max are NCCL's max (OR) and prod and min its min (AND), as the CPU kernels define
// them; premul_sum is an NCCL op made per call (ncclRedOpCreatePreMulSum) and is not mapped
// here; band, bor and bxor do not exist in NCCL and are InvalidArgument naming the op.
// Thread-safe: pure functions.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "cuda/runtime.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::backends::nccl {

using cuda::check_cuda;

ncclDataType_t nccl_datatype(DType dtype);

// NCCL's op for `op` on `dtype` (not premul_sum); InvalidArgument naming the op for the
// bitwise ones, which NCCL lacks. `what` names the call in the message ("all_reduce").
ncclRedOp_t nccl_reduce_op(const char* what, ReduceOpKind op, DType dtype);

// Why memory of `type` on `device` cannot be a buffer of a group on `group_device` (NCCL
// reads and writes it from that device's kernels), or "" when it can: device memory of the
// group's device, or managed memory. E.g. "host memory (not registered with CUDA)".
std::string buffer_problem(cudaMemoryType type, int device, int group_device);

// Throws for a failed NCCL call: InvalidArgument for ncclInvalidArgument and
// ncclInvalidUsage, PeerError otherwise (the communicator is broken: a remote or system
// error, or CUDA failed under it), naming `what`, NCCL's error string and, when `comm` is
// given, ncclGetLastError's detail. Returns normally for ncclSuccess and ncclInProgress.
void check_nccl(ncclResult_t rc, const std::string& what, ncclComm_t comm = nullptr);

// "2.28.3", the NCCL library loaded at run time.
std::string nccl_runtime_version();

}  // namespace tdist::backends::nccl
