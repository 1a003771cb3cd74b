// Element types of the buffers tdist moves and reduces, with their sizes and names.
// Plain value types; all functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tdist {

enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64, kBool };

inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                                       DType::kBF16, DType::kI8,  DType::kU8,
                                       DType::kI32,  DType::kI64, DType::kBool};

// Size of one element in bytes.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

constexpr bool is_integral(DType t) { return !is_floating(t) && t != DType::kBool; }

// Short name: "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "bool".
std::string_view dtype_name(DType t);

// Parses a short name or torch's name ("float32", "float", "half", "bfloat16", "int8",
// "uint8", "int32", "int", "int64", "long", "bool"). Returns nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace tdist
