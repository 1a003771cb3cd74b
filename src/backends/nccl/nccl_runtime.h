// The nccl backend's pieces that need no GPU: tdist's dtypes and reduce ops as NCCL's, the
// choice of a process's device, and the translation of CUDA and NCCL status codes into
// tdist exceptions. Internal to tdist (not installed).
//
// Dtypes: every tdist dtype has an NCCL type; bool travels as uint8 (one byte, 0 or 1).
// Reduce ops: sum, prod, min, max and avg map to NCCL's (avg: NCCL divides integers
// truncating, as tdist does, and multiplies floats by 1/world before summing); on bool,
// sum and max are NCCL's max (OR) and prod and min its min (AND), as the CPU kernels define
// them; premul_sum is an NCCL op made per call (ncclRedOpCreatePreMulSum) and is not mapped
// here; band, bor and bxor do not exist in NCCL and are InvalidArgument naming the op.
// Thread-safe: pure functions (choose_device reads the environment).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::backends::nccl {

ncclDataType_t nccl_datatype(DType dtype);

// NCCL's op for `op` on `dtype` (not premul_sum); InvalidArgument naming the op for the
// bitwise ones, which NCCL lacks. `what` names the call in the message ("all_reduce").
ncclRedOp_t nccl_reduce_op(const char* what, ReduceOpKind op, DType dtype);

// The device a process's groups use among `device_count` visible ones: `nccl_device` (the
// TDIST_NCCL_DEVICE setting) when it is not -1, else `local_rank` (LOCAL_RANK's text)
// modulo the count when it is set, else 0. InvalidArgument when TDIST_NCCL_DEVICE names a
// device that is not visible or LOCAL_RANK is not a non-negative integer.
int choose_device(int device_count, int64_t nccl_device, std::string_view local_rank);
// The same from the environment (TDIST_NCCL_DEVICE; TDIST_LOCAL_RANK, else LOCAL_RANK).
int choose_device(int device_count);

// Why memory of `type` on `device` cannot be a buffer of a group on `group_device` (NCCL
// reads and writes it from that device's kernels), or "" when it can: device memory of the
// group's device, or managed memory. E.g. "host memory (not registered with CUDA)".
std::string buffer_problem(cudaMemoryType type, int device, int group_device);

// The number of visible CUDA devices; Error "<backend>: no CUDA device is visible: <why>"
// when there is none or the CUDA runtime cannot tell (no driver, no device).
int visible_devices(const char* backend = "nccl");

// Throws Error "<what>: <CUDA's error string> (<error name>)" unless `rc` is cudaSuccess.
void check_cuda(cudaError_t rc, const std::string& what);

// Throws for a failed NCCL call: InvalidArgument for ncclInvalidArgument and
// ncclInvalidUsage, PeerError otherwise (the communicator is broken: a remote or system
// error, or CUDA failed under it), naming `what`, NCCL's error string and, when `comm` is
// given, ncclGetLastError's detail. Returns normally for ncclSuccess and ncclInProgress.
void check_nccl(ncclResult_t rc, const std::string& what, ncclComm_t comm = nullptr);

// "2.28.3", the NCCL library loaded at run time.
std::string nccl_runtime_version();

}  // namespace tdist::backends::nccl
