// The element loops of the reduction kernels, written once as templates and compiled
// once per ISA: each reduce_kernels_<isa>.cc includes this header with its own -m flags
// and calls make_table<vector bytes>(), so the same loops become that ISA's code.
//
// The loops use GCC/Clang vector extensions (Vec<T, N>), so one source yields SSE, AVX2
// or AVX-512 code. A kernel walks the buffers one vector of kW bytes at a time, four per
// iteration: load a and b (unaligned, through memcpy), combine, store. Each vector is
// fully loaded before its store, so dst may alias a or b exactly. The tail is padded
// with zeros into a local vector and handled by the same code.
//
// A codec says how one vector step of stored elements is combined: PlainCodec<T, kW>
// for types computed as themselves, SoftF16Codec and SoftBf16Codec for f16 and bf16
// (computed in f32, rounded back to nearest-even, NaN stays NaN). An ISA may pass its
// own codec (e.g. F16C instructions for f16).
//
// Everything here has internal linkage on purpose: each ISA's translation unit must get
// its own copy, or the linker would merge copies compiled for different CPUs. For the
// same reason nothing here calls an out-of-line standard-library function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_kernels_table.h"

namespace tdist::core {
namespace {  // NOLINT(google-build-namespaces): one copy per ISA translation unit

// ---- vectors --------------------------------------------------------------------------

template <typename T, size_t kLanes>
struct VecOf {
  typedef T Type __attribute__((vector_size(sizeof(T) * kLanes)));
};
template <typename T, size_t kLanes>
using Vec = typename VecOf<T, kLanes>::Type;

template <typename V>
using ElemOf = std::remove_cvref_t<decltype(std::declval<V>()[0])>;

// Lanes of `m` (all ones or all zeros, as comparisons give) pick x, else y.
template <typename V, typename M>
inline V select(M m, V x, V y) {
  return (V)(((M)x & m) | ((M)y & ~m));
}

template <typename V>
inline V load_vec(const unsigned char* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
inline void store_vec(V v, unsigned char* p) {
  std::memcpy(p, &v, sizeof v);
}

// ---- codecs ---------------------------------------------------------------------------

// A codec for kW-byte vectors says how a step of kStepBytes bytes of Storage elements
// is combined: binary<Op>(dst, a, b) and unary(data, f), with Op and f working on V,
// a vector of Compute. Most codecs get both from load and store through this base.
template <typename Codec>
struct LoadStoreSteps {
  template <typename Op>
  static void binary(unsigned char* d, const unsigned char* a, const unsigned char* b) {
    Codec::store(Op::apply(Codec::load(a), Codec::load(b)), d);
  }
  template <typename F>
  static void unary(unsigned char* p, F f) {
    Codec::store(f(Codec::load(p)), p);
  }
};

template <typename T, size_t kW>
struct PlainCodec : LoadStoreSteps<PlainCodec<T, kW>> {
  using Storage = T;
  using Compute = T;
  static constexpr size_t kStepBytes = kW;
  using V = Vec<T, kW / sizeof(T)>;
  static V load(const unsigned char* p) { return load_vec<V>(p); }
  static void store(V v, unsigned char* p) { store_vec(v, p); }
};

// f16 in software (integer and float vector operations), kW/4 lanes of f32.
template <size_t kW>
struct SoftF16Codec : LoadStoreSteps<SoftF16Codec<kW>> {
  static constexpr size_t kLanes = kW / sizeof(float);
  using Storage = uint16_t;
  using Compute = float;
  static constexpr size_t kStepBytes = kLanes * sizeof(uint16_t);
  using V = Vec<float, kLanes>;
  using U = Vec<uint32_t, kLanes>;
  using S = Vec<int32_t, kLanes>;
  using H = Vec<uint16_t, kLanes>;

  // Exact: normal and subnormal halves are rescaled by 2^112 in one multiply.
  static V load(const unsigned char* p) {
    U h = __builtin_convertvector(load_vec<H>(p), U);
    U sign = (h & 0x8000u) << 16;
    U magnitude = h & 0x7FFFu;
    U finite = (U)((V)(magnitude << 13) * 0x1p112f);
    U special = ((magnitude & 0x3FFu) << 13) | 0x7F800000u;  // inf or NaN
    return (V)(select((S)magnitude >= 0x7C00, special, finite) | sign);
  }
  // Round to nearest-even; overflow gives inf, NaN a quiet NaN. The float addition
  // does the rounding (M. Dukhan's FP16 method): needs the default rounding mode and no
  // fused multiply-add (the kernels are built with -ffp-contract=off).
  static void store(V f, unsigned char* p) {
    U w = (U)f;
    U shl1 = w + w;
    U sign = w & 0x80000000u;
    V base = ((V)(w & 0x7FFFFFFFu) * 0x1p112f) * 0x1p-110f;
    U bias = shl1 & 0xFF000000u;
    bias = select(bias < 0x71000000u, bias * 0u + 0x71000000u, bias);
    base = (V)((bias >> 1) + 0x07800000u) + base;
    U b = (U)base;
    U nonsign = ((b >> 13) & 0x7C00u) + (b & 0x0FFFu);
    U nan = w * 0u + 0x7E00u;
    U half = (sign >> 16) | select(shl1 > 0xFF000000u, nan, nonsign);
    store_vec(__builtin_convertvector(half, H), p);
  }
};

// bf16 without any widening: a 32-bit lane holds two bf16, the even element in its low
// half and the odd one in its high half. Each becomes an f32 in place (shift or mask),
// the op runs on the evens and on the odds, and the rounded results are merged back.
template <size_t kW>
struct SoftBf16Codec {
  static constexpr size_t kLanes = kW / sizeof(float);
  using Storage = uint16_t;
  using Compute = float;
  static constexpr size_t kStepBytes = kW;
  using V = Vec<float, kLanes>;
  using U = Vec<uint32_t, kLanes>;
  using S = Vec<int32_t, kLanes>;

  static V even(U w) { return (V)(w << 16); }
  static V odd(U w) { return (V)(w & 0xFFFF0000u); }
  // The bf16 in the high half: rounded to nearest-even; NaN keeps its sign and top
  // payload and is made quiet.
  static U round_high(V f) {
    U u = (U)f;
    U rounded = u + 0x7FFFu + ((u >> 16) & 1u);
    U nan = u | 0x00400000u;
    return select((S)(u & 0x7FFFFFFFu) > 0x7F800000, nan, rounded) & 0xFFFF0000u;
  }
  static void put(V evens, V odds, unsigned char* p) {
    store_vec((round_high(evens) >> 16) | round_high(odds), p);
  }
  template <typename Op>
  static void binary(unsigned char* d, const unsigned char* a, const unsigned char* b) {
    U x = load_vec<U>(a);
    U y = load_vec<U>(b);
    put(Op::apply(even(x), even(y)), Op::apply(odd(x), odd(y)), d);
  }
  template <typename F>
  static void unary(unsigned char* p, F f) {
    U x = load_vec<U>(p);
    put(f(even(x)), f(odd(x)), p);
  }
};

// ---- element operations ---------------------------------------------------------------

// The unsigned vector of the same shape as an integer vector, else the vector itself.
template <typename V, typename T = ElemOf<V>>
struct ArithOf {
  using Type = V;
};
template <typename V, typename T>
requires std::is_integral_v<T>
struct ArithOf<V, T> {
  using Type = Vec<std::make_unsigned_t<T>, sizeof(V) / sizeof(T)>;
};
template <typename V>
using Arith = typename ArithOf<V>::Type;

struct AddOp {
  template <typename V>
  static V apply(V a, V b) {
    return (V)((Arith<V>)a + (Arith<V>)b);
  }
};

struct MulOp {
  template <typename V>
  static V apply(V a, V b) {
    return (V)((Arith<V>)a * (Arith<V>)b);
  }
};

struct MinOp {
  template <typename V>
  static V apply(V a, V b) {
    return select((a < b) | (a != a), a, b);  // a != a only for NaN
  }
};

struct MaxOp {
  template <typename V>
  static V apply(V a, V b) {
    return select((a > b) | (a != a), a, b);
  }
};

struct AndOp {
  template <typename V>
  static V apply(V a, V b) {
    return a & b;
  }
};

struct OrOp {
  template <typename V>
  static V apply(V a, V b) {
    return a | b;
  }
};

struct XorOp {
  template <typename V>
  static V apply(V a, V b) {
    return a ^ b;
  }
};

// Bool: comparisons give -1 (all ones) for true; & 1 makes it 1.
struct BoolOrOp {
  template <typename V>
  static V apply(V a, V b) {
    return (V)((a | b) != 0) & 1;
  }
};

struct BoolAndOp {
  template <typename V>
  static V apply(V a, V b) {
    return (V)((a != 0) & (b != 0)) & 1;
  }
};

struct BoolXorOp {
  template <typename V>
  static V apply(V a, V b) {
    return (V)((a != 0) ^ (b != 0)) & 1;
  }
};

// ---- loops ----------------------------------------------------------------------------

template <typename Codec, typename Op>
inline void binary_step(unsigned char* d, const unsigned char* a, const unsigned char* b) {
  Codec::template binary<Op>(d, a, b);
}

template <typename Codec, typename Op>
void binary_kernel(void* dst, const void* a, const void* b, size_t count) {
  constexpr size_t kStep = Codec::kStepBytes;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  const size_t bytes = count * sizeof(typename Codec::Storage);
  size_t i = 0;
  for (; i + 4 * kStep <= bytes; i += 4 * kStep) {
    binary_step<Codec, Op>(d + i, pa + i, pb + i);
    binary_step<Codec, Op>(d + i + kStep, pa + i + kStep, pb + i + kStep);
    binary_step<Codec, Op>(d + i + 2 * kStep, pa + i + 2 * kStep, pb + i + 2 * kStep);
    binary_step<Codec, Op>(d + i + 3 * kStep, pa + i + 3 * kStep, pb + i + 3 * kStep);
  }
  for (; i + kStep <= bytes; i += kStep) binary_step<Codec, Op>(d + i, pa + i, pb + i);
  if (i < bytes) {
    unsigned char ta[kStep] = {};
    unsigned char tb[kStep] = {};
    std::memcpy(ta, pa + i, bytes - i);
    std::memcpy(tb, pb + i, bytes - i);
    binary_step<Codec, Op>(ta, ta, tb);
    std::memcpy(d + i, ta, bytes - i);
  }
}

// data[i] = f(data[i]) a vector at a time, for f a lambda on Codec::V.
template <typename Codec, typename F>
inline void unary_loop(void* data, size_t count, F f) {
  constexpr size_t kStep = Codec::kStepBytes;
  auto* d = static_cast<unsigned char*>(data);
  const size_t bytes = count * sizeof(typename Codec::Storage);
  size_t i = 0;
  for (; i + kStep <= bytes; i += kStep) Codec::unary(d + i, f);
  if (i < bytes) {
    unsigned char t[kStep] = {};
    std::memcpy(t, d + i, bytes - i);
    Codec::unary(t, f);
    std::memcpy(d + i, t, bytes - i);
  }
}

// Floating types: multiply in the compute type (f32 for f16 and bf16).
template <typename Codec>
void scale_kernel(void* data, size_t count, double scale) {
  using V = typename Codec::V;
  const auto factor = static_cast<typename Codec::Compute>(scale);
  unary_loop<Codec>(data, count, [factor](V v) { return v * factor; });
}

// Floating types divide in the compute type; integers one element at a time in
// int64_t (no vector integer division exists), truncating toward zero.
template <typename Codec>
void divide_kernel(void* data, size_t count, int divisor) {
  using C = typename Codec::Compute;
  using V = typename Codec::V;
  if constexpr (std::is_floating_point_v<C>) {
    const auto d = static_cast<C>(divisor);
    unary_loop<Codec>(data, count, [d](V v) { return v / d; });
  } else {
    auto* p = static_cast<unsigned char*>(data);
    for (size_t i = 0; i < count; ++i, p += sizeof(C)) {
      C x;
      std::memcpy(&x, p, sizeof x);
      x = static_cast<C>(static_cast<int64_t>(x) / divisor);
      std::memcpy(p, &x, sizeof x);
    }
  }
}

// ---- tables ---------------------------------------------------------------------------

constexpr size_t index_of(DType t) { return static_cast<size_t>(t); }
constexpr size_t index_of(ReduceOpKind k) { return static_cast<size_t>(k); }

template <typename Codec>
void fill_floating(KernelTable& t, DType dtype) {
  auto& row = t.binary[index_of(dtype)];
  row[index_of(ReduceOpKind::kSum)] = binary_kernel<Codec, AddOp>;
  row[index_of(ReduceOpKind::kAvg)] = binary_kernel<Codec, AddOp>;
  row[index_of(ReduceOpKind::kPremulSum)] = binary_kernel<Codec, AddOp>;
  row[index_of(ReduceOpKind::kProd)] = binary_kernel<Codec, MulOp>;
  row[index_of(ReduceOpKind::kMin)] = binary_kernel<Codec, MinOp>;
  row[index_of(ReduceOpKind::kMax)] = binary_kernel<Codec, MaxOp>;
  t.scale[index_of(dtype)] = scale_kernel<Codec>;
  t.divide[index_of(dtype)] = divide_kernel<Codec>;
}

template <typename Codec>
void fill_integral(KernelTable& t, DType dtype) {
  auto& row = t.binary[index_of(dtype)];
  row[index_of(ReduceOpKind::kSum)] = binary_kernel<Codec, AddOp>;
  row[index_of(ReduceOpKind::kAvg)] = binary_kernel<Codec, AddOp>;
  row[index_of(ReduceOpKind::kProd)] = binary_kernel<Codec, MulOp>;
  row[index_of(ReduceOpKind::kMin)] = binary_kernel<Codec, MinOp>;
  row[index_of(ReduceOpKind::kMax)] = binary_kernel<Codec, MaxOp>;
  row[index_of(ReduceOpKind::kBand)] = binary_kernel<Codec, AndOp>;
  row[index_of(ReduceOpKind::kBor)] = binary_kernel<Codec, OrOp>;
  row[index_of(ReduceOpKind::kBxor)] = binary_kernel<Codec, XorOp>;
  t.divide[index_of(dtype)] = divide_kernel<Codec>;
}

template <typename Codec>
void fill_bool(KernelTable& t) {
  auto& row = t.binary[index_of(DType::kBool)];
  row[index_of(ReduceOpKind::kSum)] = binary_kernel<Codec, BoolOrOp>;
  row[index_of(ReduceOpKind::kMax)] = binary_kernel<Codec, BoolOrOp>;
  row[index_of(ReduceOpKind::kBor)] = binary_kernel<Codec, BoolOrOp>;
  row[index_of(ReduceOpKind::kProd)] = binary_kernel<Codec, BoolAndOp>;
  row[index_of(ReduceOpKind::kMin)] = binary_kernel<Codec, BoolAndOp>;
  row[index_of(ReduceOpKind::kBand)] = binary_kernel<Codec, BoolAndOp>;
  row[index_of(ReduceOpKind::kBxor)] = binary_kernel<Codec, BoolXorOp>;
}

// The whole table for one ISA with kW-byte vectors; F16 and Bf16 are the codecs it uses
// for those types.
template <size_t kW, typename F16 = SoftF16Codec<kW>, typename Bf16 = SoftBf16Codec<kW>>
KernelTable make_table(Isa isa) {
  KernelTable t;
  t.isa = isa;
  fill_floating<PlainCodec<float, kW>>(t, DType::kF32);
  fill_floating<PlainCodec<double, kW>>(t, DType::kF64);
  fill_floating<F16>(t, DType::kF16);
  fill_floating<Bf16>(t, DType::kBF16);
  fill_integral<PlainCodec<int8_t, kW>>(t, DType::kI8);
  fill_integral<PlainCodec<uint8_t, kW>>(t, DType::kU8);
  fill_integral<PlainCodec<int32_t, kW>>(t, DType::kI32);
  fill_integral<PlainCodec<int64_t, kW>>(t, DType::kI64);
  fill_bool<PlainCodec<uint8_t, kW>>(t);
  return t;
}

}  // namespace
}  // namespace tdist::core
