// The table of kernels one instruction set provides, one entry per (dtype, op), and the
// functions that return each ISA's table. Private to src/core: reduce_kernels.cc picks a
// table, reduce_kernels_<isa>.cc fill them (see reduce_kernels_impl.h).
//
// Entries are null where the (dtype, op) pair is not supported; callers validate first.
// Tables are immutable after construction and safe to read from any thread.
#pragma once

#include <cstddef>
#include <iterator>

#include "core/reduce_kernels.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::core {

// dst[i] = op(a[i], b[i]); dst may be a or b. Pointers need no alignment.
using BinaryKernel = void (*)(void* dst, const void* a, const void* b, size_t count);
// data[i] *= scale (floating dtypes only).
using ScaleKernel = void (*)(void* data, size_t count, double scale);
// data[i] /= divisor (integers truncate toward zero); divisor >= 1.
using DivideKernel = void (*)(void* data, size_t count, int divisor);

inline constexpr size_t kNumDTypes = std::size(kAllDTypes);
inline constexpr size_t kNumReduceOps = std::size(kAllReduceOpKinds);

struct KernelTable {
  Isa isa = Isa::kScalar;
  BinaryKernel binary[kNumDTypes][kNumReduceOps] = {};
  ScaleKernel scale[kNumDTypes] = {};
  DivideKernel divide[kNumDTypes] = {};
};

// Each is defined in its own translation unit, compiled for that ISA. Only call one
// whose ISA the CPU supports. The x86 tables exist only on x86 builds.
const KernelTable& scalar_kernels();
#if defined(__x86_64__) || defined(__i386__)
const KernelTable& sse4_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
#endif

}  // namespace tdist::core
