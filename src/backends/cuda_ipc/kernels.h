// The cuda_ipc backend's device kernels (kernels.cu, compiled by nvcc): the element-wise
// reductions of core/reduce_kernels.h on device memory, with the same meaning — sum, avg
// and premul_sum add; bool: sum/max OR, prod/min AND; NaN propagates through min and max;
// f16 and bf16 compute in f32 and round to nearest-even; avg divides in the compute type
// (integers truncate toward zero). The interface names no CUDA or tdist type, so nvcc
// compiles kernels.cu as C++17 alone: dtypes and ops are tdist's enum values, a stream is
// a cudaStream_t. Each call enqueues one kernel on `stream` and returns the cudaError_t of
// the launch (0: cudaSuccess). Internal to tdist (not installed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdist::backends::cuda_ipc::kernels {

// dst[i] = op(a[i], b[i]); `dtype` is a tdist::DType, `op` a tdist::ReduceOpKind (sum for
// avg and premul_sum). dst may alias a or b exactly.
int reduce(void* dst, const void* a, const void* b, size_t count, int dtype, int op, void* stream);
// data[i] *= scale, in the compute type (floating dtypes).
int scale(void* data, size_t count, int dtype, double scale, void* stream);
// data[i] /= divisor, in the compute type (integers truncate toward zero).
int divide(void* data, size_t count, int dtype, int divisor, void* stream);

}  // namespace tdist::backends::cuda_ipc::kernels
