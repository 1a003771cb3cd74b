// tdist-bench data: verifiable inputs and the independent check (see data.h).
#include "tdist_bench/data.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace tdist_bench {
namespace {

using tdist::DType;
using tdist::ReduceOpKind;

// ---- f16 / bf16 bit patterns ----

// Exact for every value this tool writes (small integers); other values are truncated.
uint16_t float_to_half(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if ((bits & 0x7fffffffu) == 0) return static_cast<uint16_t>(sign);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow: inf
  if (exponent <= 0) return static_cast<uint16_t>(sign);             // tiny: zero
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13));
}

double half_to_double(uint16_t h) {
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

uint16_t float_to_bf16(float f) {  // exact for small integers (truncation otherwise)
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

double bf16_to_double(uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
}

// ---- typed element access: one instantiation per dtype ----

template <DType D>
void store(void* data, size_t i, int64_t v) {
  auto* base = static_cast<unsigned char*>(data) + i * tdist::dtype_size(D);
  auto put = [base](auto x) { std::memcpy(base, &x, sizeof x); };
  if constexpr (D == DType::kF32) put(static_cast<float>(v));
  if constexpr (D == DType::kF64) put(static_cast<double>(v));
  if constexpr (D == DType::kF16) put(float_to_half(static_cast<float>(v)));
  if constexpr (D == DType::kBF16) put(float_to_bf16(static_cast<float>(v)));
  if constexpr (D == DType::kI8) put(static_cast<int8_t>(v));
  if constexpr (D == DType::kU8) put(static_cast<uint8_t>(v));
  if constexpr (D == DType::kI32) put(static_cast<int32_t>(v));
  if constexpr (D == DType::kI64) put(static_cast<int64_t>(v));
  if constexpr (D == DType::kBool) put(static_cast<uint8_t>(v != 0 ? 1 : 0));
}

template <DType D>
double load(const void* data, size_t i) {
  const auto* base = static_cast<const unsigned char*>(data) + i * tdist::dtype_size(D);
  auto get = [base](auto x) {
    std::memcpy(&x, base, sizeof x);
    return x;
  };
  if constexpr (D == DType::kF32) return get(float{});
  if constexpr (D == DType::kF64) return get(double{});
  if constexpr (D == DType::kF16) return half_to_double(get(uint16_t{}));
  if constexpr (D == DType::kBF16) return bf16_to_double(get(uint16_t{}));
  if constexpr (D == DType::kI8) return get(int8_t{});
  if constexpr (D == DType::kU8) return get(uint8_t{});
  if constexpr (D == DType::kI32) return get(int32_t{});
  if constexpr (D == DType::kI64) return static_cast<double>(get(int64_t{}));
  if constexpr (D == DType::kBool) return get(uint8_t{});  // any byte but 0/1 is wrong
}

// Calls f.template operator()<D>() with the runtime dtype as a template argument.
template <typename F>
decltype(auto) with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f.template operator()<DType::kF32>();
    case DType::kF64:
      return f.template operator()<DType::kF64>();
    case DType::kF16:
      return f.template operator()<DType::kF16>();
    case DType::kBF16:
      return f.template operator()<DType::kBF16>();
    case DType::kI8:
      return f.template operator()<DType::kI8>();
    case DType::kU8:
      return f.template operator()<DType::kU8>();
    case DType::kI32:
      return f.template operator()<DType::kI32>();
    case DType::kI64:
      return f.template operator()<DType::kI64>();
    case DType::kBool:
      return f.template operator()<DType::kBool>();
  }
  return f.template operator()<DType::kF32>();
}

// An integer result as the dtype stores it (integers wrap as the kernels do).
double as_dtype(int64_t v, DType dtype) {
  switch (dtype) {
    case DType::kI8:
      return static_cast<int8_t>(v);
    case DType::kU8:
      return static_cast<uint8_t>(v);
    case DType::kI32:
      return static_cast<int32_t>(v);
    case DType::kBool:
      return v != 0 ? 1 : 0;
    default:
      return static_cast<double>(v);
  }
}

// Relative tolerance of an avg result (the only rounded result this tool checks).
double avg_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 4.0 / 1024;
    case DType::kBF16:
      return 4.0 / 128;
    case DType::kF32:
      return 4.0 / (1 << 23);
    case DType::kF64:
      return 1e-14;
    default:
      return 0;
  }
}

bool matches(double got, double expected, const Pattern& p) {
  if (p.reduction && p.op == ReduceOpKind::kAvg && tdist::is_floating(p.dtype)) {
    return std::fabs(got - expected) <= avg_tolerance(p.dtype) * std::max(1.0, std::fabs(expected));
  }
  return got == expected;  // NaN never matches
}

}  // namespace

int64_t input_value(const Pattern& p, int rank, size_t index) {
  const bool is_bool = p.dtype == DType::kBool;
  const auto r = static_cast<int64_t>(rank);
  if (!p.reduction) {  // data movement: many distinct values, all below 97
    int64_t v = (r * 31 + static_cast<int64_t>(index % 97) * 7) % 97;
    return is_bool ? v % 2 : v;
  }
  switch (p.op) {
    case ReduceOpKind::kProd: {  // exactly one rank contributes 2 (bool: one rank a 0)
      const auto w = static_cast<size_t>(std::max(p.world, 1));
      if (is_bool) return static_cast<size_t>(rank) != index % (w + 1) ? 1 : 0;
      return static_cast<size_t>(rank) == index % w ? 2 : 1;
    }
    case ReduceOpKind::kBand:
    case ReduceOpKind::kBor:
    case ReduceOpKind::kBxor: {
      int64_t v = (r * 5 + static_cast<int64_t>(index % 16) * 3) % 16;
      return is_bool ? v % 2 : v;
    }
    default: {  // sum, avg, premul_sum, min, max: 1..5 (bool: a mix of 0 and 1)
      if (is_bool) return (r + static_cast<int64_t>(index % 3)) % 3 == 0 ? 1 : 0;
      return (r * 3 + static_cast<int64_t>(index % 5) * 7) % 5 + 1;
    }
  }
}

double reduced_value(const Pattern& p, size_t index) {
  int64_t acc = input_value(p, 0, index);
  for (int r = 1; r < p.world; ++r) {
    int64_t v = input_value(p, r, index);
    switch (p.op) {
      case ReduceOpKind::kProd:
        acc *= v;
        break;
      case ReduceOpKind::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOpKind::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOpKind::kBand:
        acc &= v;
        break;
      case ReduceOpKind::kBor:
        acc |= v;
        break;
      case ReduceOpKind::kBxor:
        acc ^= v;
        break;
      default:
        acc += v;
        break;  // sum, avg, premul_sum
    }
  }
  if (p.op == ReduceOpKind::kAvg) {
    if (tdist::is_floating(p.dtype)) return static_cast<double>(acc) / p.world;
    return as_dtype(acc / p.world, p.dtype);  // integers divide truncating
  }
  if (p.op == ReduceOpKind::kPremulSum) return static_cast<double>(acc) * kPremulScale;
  return as_dtype(acc, p.dtype);
}

void fill_inputs(void* data, size_t count, const Pattern& p, int rank, size_t first) {
  with_dtype(p.dtype, [&]<DType D>() {
    for (size_t i = 0; i < count; ++i) store<D>(data, i, input_value(p, rank, first + i));
  });
}

void fill_poison(void* data, size_t count, DType dtype) {
  if (tdist::is_floating(dtype)) {
    with_dtype(dtype, [&]<DType D>() {
      for (size_t i = 0; i < count; ++i) {
        auto* base = static_cast<unsigned char*>(data) + i * tdist::dtype_size(D);
        if constexpr (D == DType::kF32) {
          float nan = std::numeric_limits<float>::quiet_NaN();
          std::memcpy(base, &nan, sizeof nan);
        } else if constexpr (D == DType::kF64) {
          double nan = std::numeric_limits<double>::quiet_NaN();
          std::memcpy(base, &nan, sizeof nan);
        } else {
          uint16_t nan = D == DType::kF16 ? 0x7e00 : 0x7fc0;
          std::memcpy(base, &nan, sizeof nan);
        }
      }
    });
    return;
  }
  std::memset(data, 0xA5, count * tdist::dtype_size(dtype));
}

int64_t count_wrong(const void* data, size_t count, const Pattern& p, bool reduced, int src_rank,
                    size_t first) {
  return with_dtype(p.dtype, [&]<DType D>() -> int64_t {
    int64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      double expected = reduced ? reduced_value(p, first + i)
                                : as_dtype(input_value(p, src_rank, first + i), p.dtype);
      if (!matches(load<D>(data, i), expected, p)) ++wrong;
    }
    return wrong;
  });
}

double load_element(const void* data, size_t i, DType dtype) {
  return with_dtype(dtype, [&]<DType D>() { return load<D>(data, i); });
}

}  // namespace tdist_bench
