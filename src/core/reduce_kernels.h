// Vectorised element-wise reduction kernels, the inner loop of every reducing
// collective. Internal to tdist (not installed).
//
// For every (dtype, op) pair that is_supported(): the kernels for kSum, kAvg and
// kPremulSum all add; kAvg's division and kPremulSum's multiplication are separate
// steps (premultiply on each rank's own input, finish on the final result), so a
// collective calls: premultiply(local) -> reduce_into(...)* -> finish(result).
// f16 and bf16 are computed in f32 and rounded back to nearest-even. NaN propagates
// through min and max (as torch does). Bool: sum/max = OR, prod/min = AND.
//
// The implementation is chosen once at run time from the CPU (AVX-512, AVX2, SSE4.1,
// scalar), or forced by TDIST_REDUCE_ISA. Pointers need no alignment; dst may alias a
// or b (exactly, not partially). Thread-safe; no allocation.
#pragma once

#include <cstddef>
#include <string_view>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::core {

enum class Isa { kScalar, kSse4, kAvx2, kAvx512 };

// dst[i] = op(dst[i], src[i]) for i < count.
void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// dst[i] = op(a[i], b[i]) for i < count.
void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// kPremulSum: data[i] *= op.scale. No-op for every other op.
void premultiply(void* data, size_t count, DType dtype, ReduceOp op);

// kAvg: data[i] /= world_size (integers truncate toward zero). No-op for other ops.
void finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size);

// The instruction set in use, its name ("avx512", "avx2", "sse4", "scalar"), the best
// one this CPU supports, and a way to force one (tests and benchmarks; thread-unsafe).
Isa active_isa();
std::string_view isa_name(Isa isa);
Isa best_supported_isa();
void force_isa(Isa isa);  // throws InvalidArgument when the CPU lacks it

}  // namespace tdist::core
