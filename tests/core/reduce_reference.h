// A slow, obviously-correct reference for the reduction kernels, written independently
// of src/core (no shared code): element-wise ops on values read with memcpy, f16 and
// bf16 rounding done in double with std::nearbyint (round half to even), and a
// comparison that explains the first mismatch. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::testing {

template <typename T>
T read_at(const uint8_t* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void write_at(uint8_t* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}

// ---- f16 / bf16 -----------------------------------------------------------------------

inline float ref_f16_to_f32(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  double magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return static_cast<float>((h & 0x8000) != 0 ? -magnitude : magnitude);
}

inline float ref_bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Rounds |x| to `precision` significant bits, with no step smaller than 2^min_exponent,
// half to even. Exact in double for every float input.
inline double round_to_precision(double magnitude, int precision, int min_exponent) {
  if (magnitude == 0) return 0;
  int e;
  std::frexp(magnitude, &e);  // magnitude in [2^(e-1), 2^e)
  int quantum_exp = std::max(e - precision, min_exponent);
  double steps = std::nearbyint(std::ldexp(magnitude, -quantum_exp));  // ties to even
  return std::ldexp(steps, quantum_exp);
}

inline uint16_t ref_f32_to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7E00;
  double r = round_to_precision(std::fabs(static_cast<double>(f)), 11, -24);
  if (r >= 65536.0) return sign | 0x7C00;  // also catches inf
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(r, 24));
  int e;
  std::frexp(r, &e);
  int mantissa = static_cast<int>(std::ldexp(r, 11 - e)) - 1024;
  return sign | static_cast<uint16_t>(((e - 1 + 15) << 10) | mantissa);
}

inline uint16_t ref_f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  double r = round_to_precision(std::fabs(static_cast<double>(f)), 8, -133);
  float rounded =
      r >= std::ldexp(1.0, 128) ? std::numeric_limits<float>::infinity() : static_cast<float>(r);
  std::memcpy(&bits, &rounded, sizeof bits);
  return static_cast<uint16_t>((bits >> 16) | (std::signbit(f) ? 0x8000 : 0));
}

// ---- element operations ---------------------------------------------------------------

template <typename F>
F ref_float_op(ReduceOpKind op, F x, F y) {
  switch (op) {
    case ReduceOpKind::kProd:
      return x * y;
    case ReduceOpKind::kMin:
      if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<F>::quiet_NaN();
      return std::min(x, y);
    case ReduceOpKind::kMax:
      if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<F>::quiet_NaN();
      return std::max(x, y);
    default:
      return x + y;  // sum, avg, premul_sum
  }
}

template <typename T>
T ref_int_op(ReduceOpKind op, T x, T y) {
  const uint64_t ux = static_cast<uint64_t>(x);
  const uint64_t uy = static_cast<uint64_t>(y);
  switch (op) {
    case ReduceOpKind::kProd:
      return static_cast<T>(ux * uy);  // wraps modulo 2^bits
    case ReduceOpKind::kMin:
      return std::min(x, y);
    case ReduceOpKind::kMax:
      return std::max(x, y);
    case ReduceOpKind::kBand:
      return static_cast<T>(ux & uy);
    case ReduceOpKind::kBor:
      return static_cast<T>(ux | uy);
    case ReduceOpKind::kBxor:
      return static_cast<T>(ux ^ uy);
    default:
      return static_cast<T>(ux + uy);  // sum, avg
  }
}

inline uint8_t ref_bool_op(ReduceOpKind op, uint8_t x, uint8_t y) {
  const bool a = x != 0;
  const bool b = y != 0;
  switch (op) {
    case ReduceOpKind::kProd:
    case ReduceOpKind::kMin:
    case ReduceOpKind::kBand:
      return a && b;
    case ReduceOpKind::kBxor:
      return a != b;
    default:
      return a || b;  // sum, max, bor
  }
}

// Applies `f` to every element of `data` (count elements of dtype), decoded to the type
// it is computed in, and encodes the result into `out`.
template <typename Fn>
void map_elements(DType dtype, size_t count, uint8_t* out, Fn&& f) {
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::kF32:
        write_at<float>(out, i, f(i, float{}));
        break;
      case DType::kF64:
        write_at<double>(out, i, f(i, double{}));
        break;
      case DType::kF16:
        write_at<uint16_t>(out, i, ref_f32_to_f16(f(i, float{})));
        break;
      case DType::kBF16:
        write_at<uint16_t>(out, i, ref_f32_to_bf16(f(i, float{})));
        break;
      case DType::kI8:
        write_at<int8_t>(out, i, f(i, int8_t{}));
        break;
      case DType::kU8:
        write_at<uint8_t>(out, i, f(i, uint8_t{}));
        break;
      case DType::kI32:
        write_at<int32_t>(out, i, f(i, int32_t{}));
        break;
      case DType::kI64:
        write_at<int64_t>(out, i, f(i, int64_t{}));
        break;
      case DType::kBool:
        write_at<uint8_t>(out, i, f(i, bool{}));
        break;
    }
  }
}

// Element i of `data` as the type it is computed in (f16/bf16 as float; bool as 0/1).
template <typename C>
C load_as(DType dtype, const uint8_t* data, size_t i) {
  switch (dtype) {
    case DType::kF16:
      return static_cast<C>(ref_f16_to_f32(read_at<uint16_t>(data, i)));
    case DType::kBF16:
      return static_cast<C>(ref_bf16_to_f32(read_at<uint16_t>(data, i)));
    case DType::kBool:
      return static_cast<C>(read_at<uint8_t>(data, i));
    default:
      return read_at<C>(data, i);
  }
}

// out[i] = op(a[i], b[i]).
inline void ref_reduce(DType dtype, ReduceOpKind op, const uint8_t* a, const uint8_t* b,
                       uint8_t* out, size_t count) {
  map_elements(dtype, count, out, [&](size_t i, auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_same_v<C, bool>) {
      return ref_bool_op(op, load_as<uint8_t>(dtype, a, i), load_as<uint8_t>(dtype, b, i)) != 0;
    } else if constexpr (std::is_floating_point_v<C>) {
      return ref_float_op<C>(op, load_as<C>(dtype, a, i), load_as<C>(dtype, b, i));
    } else {
      return ref_int_op<C>(op, load_as<C>(dtype, a, i), load_as<C>(dtype, b, i));
    }
  });
}

// data[i] *= scale in the compute type (floating dtypes).
inline void ref_premultiply(DType dtype, uint8_t* data, size_t count, double scale) {
  std::vector<uint8_t> in(data, data + count * dtype_size(dtype));
  map_elements(dtype, count, data, [&](size_t i, auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_floating_point_v<C>) {
      return load_as<C>(dtype, in.data(), i) * static_cast<C>(scale);
    } else {
      return C{};
    }
  });
}

// data[i] /= n: floats in the compute type, integers truncating toward zero.
inline void ref_divide(DType dtype, uint8_t* data, size_t count, int n) {
  std::vector<uint8_t> in(data, data + count * dtype_size(dtype));
  map_elements(dtype, count, data, [&](size_t i, auto tag) {
    using C = decltype(tag);
    if constexpr (std::is_floating_point_v<C>) {
      return load_as<C>(dtype, in.data(), i) / static_cast<C>(n);
    } else if constexpr (std::is_same_v<C, bool>) {
      return false;
    } else {
      return static_cast<C>(static_cast<int64_t>(load_as<C>(dtype, in.data(), i)) / n);
    }
  });
}

// ---- comparison -----------------------------------------------------------------------

// Floating elements must match bit for bit, except that any NaN matches any NaN and
// +0 matches -0 (min/max of zeros may return either). Others must match exactly.
inline std::optional<std::string> first_mismatch(DType dtype, const uint8_t* got,
                                                 const uint8_t* want, size_t count) {
  const size_t size = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * size, want + i * size, size) == 0) continue;
    double g = 0;
    double w = 0;
    if (dtype == DType::kF64) {
      g = read_at<double>(got, i);
      w = read_at<double>(want, i);
    } else if (is_floating(dtype)) {
      g = load_as<float>(dtype, got, i);
      w = load_as<float>(dtype, want, i);
    }
    if (is_floating(dtype) && ((std::isnan(g) && std::isnan(w)) || (g == 0 && w == 0))) {
      continue;
    }
    uint64_t gb = 0;
    uint64_t wb = 0;
    std::memcpy(&gb, got + i * size, size);
    std::memcpy(&wb, want + i * size, size);
    char text[160];
    std::snprintf(text, sizeof text, "element %zu: got 0x%llx (%.9g), want 0x%llx (%.9g)", i,
                  static_cast<unsigned long long>(gb), g, static_cast<unsigned long long>(wb), w);
    return std::string(text);
  }
  return std::nullopt;
}

}  // namespace tdist::testing
