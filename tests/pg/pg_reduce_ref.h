// Inputs and an independent reference for reductions across ranks.
//
// Rank r's element `index` of case `seed` is a deterministic value chosen so the
// reference is exact where the comparison is exact:
//  - f16/bf16: small integers (sums, products and halves of them are exact); avg is
//    compared with a tolerance (the mean is rounded to the dtype)
//  - f32/f64: fractions (sums and products compared with a tolerance; min/max exact)
//  - integers: full-range values with wrapping sum/prod/bitwise ops, computed in uint64
//    and wrapped to the dtype; avg uses small values (no overflow), dividing truncating
//  - bool: 0/1; sum/max/bor are OR, prod/min/band AND, bxor XOR; results must be 0 or 1
// Test-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {

inline double float_input(DType t, ReduceOpKind op, int rank, size_t index, uint64_t seed) {
  const uint64_t h = mix(seed, static_cast<uint64_t>(rank), index, 0xF1);
  const bool half = t == DType::kF16 || t == DType::kBF16;
  switch (op) {
    case ReduceOpKind::kProd:
      if (half) {
        static constexpr double kFactors[] = {-2, -1, 1, 2};
        return kFactors[h % 4];
      }
      return 0.5 + 3.0 * static_cast<double>(h % (1u << 20)) / (1u << 21);  // [0.5, 2)
    case ReduceOpKind::kMin:
    case ReduceOpKind::kMax:
      if (half) return static_cast<double>(static_cast<int>(h % 201) - 100);
      return static_cast<double>(static_cast<int64_t>(h % (1u << 24)) - (1 << 23)) / (1 << 13);
    default:  // sum, avg, premul_sum
      if (half) return static_cast<double>(static_cast<int>(h % 17) - 8);
      return static_cast<double>(static_cast<int64_t>(h % (1u << 24)) - (1 << 23)) / (1 << 23);
  }
}

inline int64_t int_input(DType t, ReduceOpKind op, int rank, size_t index, uint64_t seed) {
  const uint64_t h = mix(seed, static_cast<uint64_t>(rank), index, 0x17);
  if (t == DType::kBool) {
    switch (op) {
      case ReduceOpKind::kProd:
      case ReduceOpKind::kMin:
      case ReduceOpKind::kBand:
        return h % 8 != 0 ? 1 : 0;
      case ReduceOpKind::kBxor:
        return static_cast<int64_t>(h & 1);
      default:
        return h % 8 == 0 ? 1 : 0;
    }
  }
  if (op == ReduceOpKind::kAvg) {
    switch (t) {
      case DType::kI8:
        return static_cast<int64_t>(h % 11) - 5;
      case DType::kU8:
        return static_cast<int64_t>(h % 11);
      default:
        return static_cast<int64_t>(h % 2000001) - 1000000;
    }
  }
  return wrap_int(t, static_cast<int64_t>(h));
}

// Writes rank `rank`'s inputs for elements first_index .. first_index + count - 1.
inline void fill_inputs(DType t, ReduceOp op, int rank, void* buf, size_t count, size_t first_index,
                        uint64_t seed) {
  for (size_t i = 0; i < count; ++i) {
    if (is_floating(t)) {
      put_float(t, buf, i, float_input(t, op.kind, rank, first_index + i, seed));
    } else {
      put_int(t, buf, i, int_input(t, op.kind, rank, first_index + i, seed));
    }
  }
}

// True when `buf` still holds exactly what fill_inputs wrote.
inline bool inputs_intact(DType t, ReduceOp op, int rank, const void* buf, size_t count,
                          size_t first_index, uint64_t seed) {
  Buffer expected(t, count);
  fill_inputs(t, op, rank, expected.data(), count, first_index, seed);
  return count == 0 || std::memcmp(expected.data(), buf, expected.bytes()) == 0;
}

inline double float_reference(DType t, ReduceOp op, int world, size_t index, uint64_t seed) {
  double acc = 0;
  for (int r = 0; r < world; ++r) {
    double x = float_input(t, op.kind, r, index, seed);
    if (op.kind == ReduceOpKind::kPremulSum) x *= op.scale;
    if (r == 0) {
      acc = x;
      continue;
    }
    switch (op.kind) {
      case ReduceOpKind::kProd:
        acc *= x;
        break;
      case ReduceOpKind::kMin:
        acc = std::min(acc, x);
        break;
      case ReduceOpKind::kMax:
        acc = std::max(acc, x);
        break;
      default:
        acc += x;
    }
  }
  return op.kind == ReduceOpKind::kAvg ? acc / world : acc;
}

inline int64_t int_reference(DType t, ReduceOp op, int world, size_t index, uint64_t seed) {
  if (t == DType::kBool) {
    bool acc = int_input(t, op.kind, 0, index, seed) != 0;
    for (int r = 1; r < world; ++r) {
      const bool x = int_input(t, op.kind, r, index, seed) != 0;
      switch (op.kind) {
        case ReduceOpKind::kProd:
        case ReduceOpKind::kMin:
        case ReduceOpKind::kBand:
          acc = acc && x;
          break;
        case ReduceOpKind::kBxor:
          acc = acc != x;
          break;
        default:
          acc = acc || x;
      }
    }
    return acc ? 1 : 0;
  }
  int64_t acc = int_input(t, op.kind, 0, index, seed);
  for (int r = 1; r < world; ++r) {
    const int64_t x = int_input(t, op.kind, r, index, seed);
    const auto ua = static_cast<uint64_t>(acc);
    const auto ux = static_cast<uint64_t>(x);
    switch (op.kind) {
      case ReduceOpKind::kProd:
        acc = static_cast<int64_t>(ua * ux);
        break;
      case ReduceOpKind::kMin:
        acc = std::min(acc, x);
        break;
      case ReduceOpKind::kMax:
        acc = std::max(acc, x);
        break;
      case ReduceOpKind::kBand:
        acc = static_cast<int64_t>(ua & ux);
        break;
      case ReduceOpKind::kBor:
        acc = static_cast<int64_t>(ua | ux);
        break;
      case ReduceOpKind::kBxor:
        acc = static_cast<int64_t>(ua ^ ux);
        break;
      default:
        acc = static_cast<int64_t>(ua + ux);
    }
  }
  if (op.kind == ReduceOpKind::kAvg) acc /= world;
  return wrap_int(t, acc);
}

// Allowed |got - expected| for a float result.
inline double float_tolerance(DType t, ReduceOpKind op, double expected) {
  if (op == ReduceOpKind::kMin || op == ReduceOpKind::kMax) return 0;
  switch (t) {
    case DType::kF32:
      return 1e-5 * (1 + std::fabs(expected));
    case DType::kF64:
      return 1e-12 * (1 + std::fabs(expected));
    default:  // f16/bf16: integers are exact; the mean is rounded to the dtype
      return op == ReduceOpKind::kAvg ? std::fabs(expected) / 128 + 1e-6 : 0;
  }
}

// Checks `got` (count elements) against the reduction over `world` ranks of elements
// first_index.. of the inputs; returns a description of the first mismatch, or "".
inline std::string check_reduction(DType t, ReduceOp op, int world, const void* got, size_t count,
                                   size_t first_index, uint64_t seed) {
  for (size_t i = 0; i < count; ++i) {
    const size_t index = first_index + i;
    if (is_floating(t)) {
      const double want = float_reference(t, op, world, index, seed);
      const double have = get_float(t, got, i);
      if (!(std::fabs(have - want) <= float_tolerance(t, op.kind, want))) {
        std::ostringstream out;
        out.precision(17);
        out << "element " << i << ": got " << have << ", expected " << want;
        return out.str();
      }
    } else {
      const int64_t want = int_reference(t, op, world, index, seed);
      const int64_t have = get_int(t, got, i);
      if (have != want) {
        std::ostringstream out;
        out << "element " << i << ": got " << have << ", expected " << want;
        return out.str();
      }
    }
  }
  return "";
}

}  // namespace tdist::pg_test
