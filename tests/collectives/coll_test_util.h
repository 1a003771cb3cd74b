// Test helpers for the collectives: deterministic per-rank inputs, a reference
// reduction computed another way (tests/core/reduce_reference.h, independent of
// src/core: a direct fold in rank order), comparison with a tolerance for floating
// results whose association order differs, settings with a given chunk size (passed in
// the Ctx instead of setting TDIST_CHUNK_BYTES), and a scoped environment variable.
// Test-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "collectives/settings.h"
#include "core/reduce_reference.h"
#include "support/scoped_env.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::testing {

using test_support::ScopedEnv;

// Collective settings with nothing forced and a pipeline chunk of `bytes`.
inline coll::CollectiveSettings chunk_settings(int64_t bytes) {
  return coll::CollectiveSettings::parse("", bytes);
}

// Small values whose sums and products are exact in every dtype (so min/max/prod and
// integer results can be compared exactly), varied by rank, element and op.
inline double input_value(int rank, size_t i, DType dtype, ReduceOpKind op) {
  const uint64_t h = (i * 2654435761u + static_cast<uint64_t>(rank) * 40503u + 12345u) >> 3;
  if (dtype == DType::kBool) return (h % 3 == 0) ? 1 : 0;
  switch (op) {
    case ReduceOpKind::kProd:
      if ((i + static_cast<size_t>(rank)) % 5 == 0) return 2;
      return (dtype == DType::kU8 || h % 2 == 0) ? 1 : -1;
    case ReduceOpKind::kBand:
    case ReduceOpKind::kBor:
    case ReduceOpKind::kBxor:
      return static_cast<double>(h % 128);
    default:
      return dtype == DType::kU8 ? static_cast<double>(h % 11) : static_cast<double>(h % 11) - 5.0;
  }
}

// Rank `rank`'s input: count elements of dtype.
inline std::vector<uint8_t> make_input(int rank, size_t count, DType dtype, ReduceOpKind op) {
  std::vector<uint8_t> out(count * dtype_size(dtype));
  map_elements(dtype, count, out.data(), [&](size_t i, auto tag) {
    using C = decltype(tag);
    return static_cast<C>(input_value(rank, i, dtype, op));
  });
  return out;
}

// The reduction of every rank's make_input, folded in rank order.
inline std::vector<uint8_t> reference_reduce(int world, size_t count, DType dtype, ReduceOp op) {
  std::vector<uint8_t> acc;
  for (int r = 0; r < world; ++r) {
    std::vector<uint8_t> in = make_input(r, count, dtype, op.kind);
    if (op.kind == ReduceOpKind::kPremulSum) ref_premultiply(dtype, in.data(), count, op.scale);
    if (r == 0) {
      acc = in;
    } else {
      ref_reduce(dtype, op.kind, acc.data(), in.data(), acc.data(), count);
    }
  }
  if (op.kind == ReduceOpKind::kAvg) ref_divide(dtype, acc.data(), count, world);
  return acc;
}

inline double as_double(DType dtype, const uint8_t* p, size_t i) {
  switch (dtype) {
    case DType::kF64:
      return read_at<double>(p, i);
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return load_as<float>(dtype, p, i);
    default:
      return 0;
  }
}

// Empty when equal: floats within a relative tolerance of the dtype (NaN matches NaN),
// everything else byte for byte.
inline std::optional<std::string> compare(DType dtype, const uint8_t* got, const uint8_t* want,
                                          size_t count) {
  if (!is_floating(dtype)) return first_mismatch(dtype, got, want, count);
  const double tol = dtype == DType::kF64   ? 1e-12
                     : dtype == DType::kF32 ? 1e-6
                     : dtype == DType::kF16 ? 2e-3
                                            : 1.6e-2;
  for (size_t i = 0; i < count; ++i) {
    const double g = as_double(dtype, got, i);
    const double w = as_double(dtype, want, i);
    if (std::isnan(g) && std::isnan(w)) continue;
    if (std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w))) continue;
    return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", want " +
           std::to_string(w);
  }
  return std::nullopt;
}

// The ops a dtype supports, with premul_sum at scale 0.5.
inline std::vector<ReduceOp> ops_for(DType dtype) {
  std::vector<ReduceOp> ops;
  for (ReduceOpKind k : kAllReduceOpKinds) {
    if (!is_supported(k, dtype)) continue;
    ops.push_back(k == ReduceOpKind::kPremulSum ? ReduceOp::premul_sum(0.5) : ReduceOp(k));
  }
  return ops;
}

}  // namespace tdist::testing
