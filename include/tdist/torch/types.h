// Mapping between LibTorch's scalar types and tdist's DType / reduce ops, shared by the
// tensor collectives and DistributedDataParallel. Pure functions; thread-safe.
// Failures: InvalidArgument naming the torch type that has no tdist counterpart
// (complex, quantized, ...).
#pragma once

#include <torch/types.h>

#include "tdist/dtype.h"
#include "tdist/error.h"

namespace tdist::torch {

inline DType to_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Char:
      return DType::kI8;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      break;
  }
  TDIST_THROW(InvalidArgument, "tensor dtype ", c10::toString(t),
              " is not supported by tdist (supported: float32, float64, float16, bfloat16, "
              "int8, uint8, int32, int64, bool)");
}

}  // namespace tdist::torch
