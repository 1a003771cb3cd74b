// The cuda_ipc backend's device kernels (kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda_ipc/kernels.h"

namespace tdist::backends::cuda_ipc::kernels {
namespace {

// tdist::DType and tdist::ReduceOpKind, by value (kernels.h).
enum DT : int { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64, kBool };
enum Op : int { kSum, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor, kPremulSum };

// Storage type T computed as C.
template <typename T>
struct Codec {
  using C = T;
  __device__ static C load(T v) { return v; }
  __device__ static T store(C v) { return v; }
};
template <>
struct Codec<__half> {
  using C = float;
  __device__ static C load(__half v) { return __half2float(v); }
  __device__ static __half store(C v) { return __float2half_rn(v); }
};
template <>
struct Codec<__nv_bfloat16> {
  using C = float;
  __device__ static C load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(C v) { return __float2bfloat16_rn(v); }
};

template <typename C>
__device__ bool is_nan(C v) {
  return v != v;
}

template <typename C, int kOp>
__device__ C combine(C a, C b) {
  if constexpr (kOp == kSum) {
    return a + b;
  } else if constexpr (kOp == kProd) {
    return a * b;
  } else if constexpr (kOp == kMin) {
    return (a < b || is_nan(a)) ? a : b;
  } else if constexpr (kOp == kMax) {
    return (a > b || is_nan(a)) ? a : b;
  } else if constexpr (kOp == kBand) {
    return a & b;
  } else if constexpr (kOp == kBor) {
    return a | b;
  } else {
    return a ^ b;
  }
}

template <typename T, int kOp>
__global__ void reduce_kernel(T* dst, const T* a, const T* b, size_t count) {
  using K = Codec<T>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = K::store(combine<typename K::C, kOp>(K::load(a[i]), K::load(b[i])));
  }
}

// Bool: sum/max OR, prod/min AND, band/bor/bxor bitwise on 0/1 bytes.
template <int kOp>
__global__ void reduce_bool_kernel(uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const bool x = a[i] != 0;
    const bool y = b[i] != 0;
    bool r;
    if constexpr (kOp == kSum || kOp == kMax || kOp == kBor) {
      r = x || y;
    } else if constexpr (kOp == kProd || kOp == kMin || kOp == kBand) {
      r = x && y;
    } else {
      r = x != y;
    }
    dst[i] = r ? 1 : 0;
  }
}

template <typename T>
__global__ void scale_kernel(T* data, size_t count, double factor) {
  using K = Codec<T>;
  const auto f = static_cast<typename K::C>(factor);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = K::store(K::load(data[i]) * f);
  }
}

template <typename T>
__global__ void divide_kernel(T* data, size_t count, int divisor) {
  using K = Codec<T>;
  using C = typename K::C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if constexpr (std::is_integral_v<C>) {
      data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / divisor);
    } else {
      data[i] = K::store(K::load(data[i]) / static_cast<C>(divisor));
    }
  }
}

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

unsigned blocks_for(size_t count) {
  const size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

template <typename T, int kOp>
int launch(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  reduce_kernel<T, kOp><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_arith(void* dst, const void* a, const void* b, size_t count, int op,
                 cudaStream_t stream) {
  switch (op) {
    case kSum:
    case kAvg:
    case kPremulSum:
      return launch<T, kSum>(dst, a, b, count, stream);
    case kProd:
      return launch<T, kProd>(dst, a, b, count, stream);
    case kMin:
      return launch<T, kMin>(dst, a, b, count, stream);
    case kMax:
      return launch<T, kMax>(dst, a, b, count, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

template <typename T>
int launch_integer(void* dst, const void* a, const void* b, size_t count, int op,
                   cudaStream_t stream) {
  switch (op) {
    case kBand:
      return launch<T, kBand>(dst, a, b, count, stream);
    case kBor:
      return launch<T, kBor>(dst, a, b, count, stream);
    case kBxor:
      return launch<T, kBxor>(dst, a, b, count, stream);
    case kPremulSum:
      return static_cast<int>(cudaErrorInvalidValue);  // floating types only
    default:
      return launch_arith<T>(dst, a, b, count, op, stream);
  }
}

template <int kOp>
int launch_bool(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  reduce_bool_kernel<kOp><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
      count);
  return static_cast<int>(cudaGetLastError());
}

int launch_bool_op(void* dst, const void* a, const void* b, size_t count, int op,
                   cudaStream_t stream) {
  switch (op) {
    case kSum:
    case kMax:
    case kBor:
      return launch_bool<kBor>(dst, a, b, count, stream);
    case kProd:
    case kMin:
    case kBand:
      return launch_bool<kBand>(dst, a, b, count, stream);
    case kBxor:
      return launch_bool<kBxor>(dst, a, b, count, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);  // avg, premul_sum: not on bool
  }
}

template <typename T>
int launch_scale(void* data, size_t count, double factor, cudaStream_t stream) {
  scale_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, factor);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_divide(void* data, size_t count, int divisor, cudaStream_t stream) {
  divide_kernel<T>
      <<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(data), count, divisor);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int reduce(void* dst, const void* a, const void* b, size_t count, int dtype, int op, void* stream) {
  if (count == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kF32:
      return op >= kBand && op <= kBxor ? static_cast<int>(cudaErrorInvalidValue)
                                        : launch_arith<float>(dst, a, b, count, op, s);
    case kF64:
      return op >= kBand && op <= kBxor ? static_cast<int>(cudaErrorInvalidValue)
                                        : launch_arith<double>(dst, a, b, count, op, s);
    case kF16:
      return op >= kBand && op <= kBxor ? static_cast<int>(cudaErrorInvalidValue)
                                        : launch_arith<__half>(dst, a, b, count, op, s);
    case kBF16:
      return op >= kBand && op <= kBxor ? static_cast<int>(cudaErrorInvalidValue)
                                        : launch_arith<__nv_bfloat16>(dst, a, b, count, op, s);
    case kI8:
      return launch_integer<int8_t>(dst, a, b, count, op, s);
    case kU8:
      return launch_integer<uint8_t>(dst, a, b, count, op, s);
    case kI32:
      return launch_integer<int32_t>(dst, a, b, count, op, s);
    case kI64:
      return launch_integer<int64_t>(dst, a, b, count, op, s);
    case kBool:
      return launch_bool_op(dst, a, b, count, op, s);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int scale(void* data, size_t count, int dtype, double factor, void* stream) {
  if (count == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kF32:
      return launch_scale<float>(data, count, factor, s);
    case kF64:
      return launch_scale<double>(data, count, factor, s);
    case kF16:
      return launch_scale<__half>(data, count, factor, s);
    case kBF16:
      return launch_scale<__nv_bfloat16>(data, count, factor, s);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int divide(void* data, size_t count, int dtype, int divisor, void* stream) {
  if (count == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case kF32:
      return launch_divide<float>(data, count, divisor, s);
    case kF64:
      return launch_divide<double>(data, count, divisor, s);
    case kF16:
      return launch_divide<__half>(data, count, divisor, s);
    case kBF16:
      return launch_divide<__nv_bfloat16>(data, count, divisor, s);
    case kI8:
      return launch_divide<int8_t>(data, count, divisor, s);
    case kU8:
      return launch_divide<uint8_t>(data, count, divisor, s);
    case kI32:
      return launch_divide<int32_t>(data, count, divisor, s);
    case kI64:
      return launch_divide<int64_t>(data, count, divisor, s);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace tdist::backends::cuda_ipc::kernels
