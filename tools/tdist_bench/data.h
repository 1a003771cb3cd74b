// tdist-bench data: filling buffers with verifiable values and counting wrong results.
//
// Every input element is a small integer chosen from (rank, index), exactly representable
// in every dtype (bf16 holds integers up to 256 exactly), so sums, products, minima and
// maxima over small worlds are exact and the expected result is computed independently
// here, element by element, in 64-bit arithmetic. Only avg is compared with a tolerance
// (the division rounds). The check needs no expected buffer: the benchmark's memory is
// its send and receive buffers and nothing else.
// Pure functions over caller-owned memory; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist_bench {

// premul_sum's scale in this tool (exact in every floating type).
inline constexpr double kPremulScale = 0.5;

// How a rank's input values are chosen. Reductions get values in 1..5 (products: one
// rank gives 2, the others 1, so the product is 2); data movement gets values in 0..96.
struct Pattern {
  tdist::DType dtype = tdist::DType::kF32;
  bool reduction = false;
  tdist::ReduceOpKind op = tdist::ReduceOpKind::kSum;  // when reduction
  int world = 1;
};

// The input value of `rank` at global index `index` (an integer, or 0/1 for bool).
int64_t input_value(const Pattern& p, int rank, size_t index);

// The expected reduction over all ranks of the inputs at `index`, as a double (exact
// where the dtype is).
double reduced_value(const Pattern& p, size_t index);

// Writes input_value(p, rank, first + i) for i in [0, count) into `data` as p.dtype.
void fill_inputs(void* data, size_t count, const Pattern& p, int rank, size_t first);

// Fills bytes with a value no check accepts (NaN for floats, 0xA5 bytes otherwise).
void fill_poison(void* data, size_t count, tdist::DType dtype);

// Counts elements i in [0, count) whose value differs from the expected one:
// input_value(p, src_rank, first + i) when reduced is false, else reduced_value(p, first + i).
int64_t count_wrong(const void* data, size_t count, const Pattern& p, bool reduced, int src_rank,
                    size_t first);

// Element i of `data` as a double (f16 and bf16 decoded exactly).
double load_element(const void* data, size_t i, tdist::DType dtype);

}  // namespace tdist_bench
