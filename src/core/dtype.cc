#include "tdist/dtype.h"

#include <array>
#include <utility>

namespace tdist {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, DType>, 17> kAliases{{
      {"float32", DType::kF32},
      {"float", DType::kF32},
      {"float64", DType::kF64},
      {"double", DType::kF64},
      {"float16", DType::kF16},
      {"half", DType::kF16},
      {"bfloat16", DType::kBF16},
      {"int8", DType::kI8},
      {"uint8", DType::kU8},
      {"int32", DType::kI32},
      {"int", DType::kI32},
      {"int64", DType::kI64},
      {"long", DType::kI64},
      {"fp32", DType::kF32},
      {"fp16", DType::kF16},
      {"fp64", DType::kF64},
      {"char", DType::kI8},
  }};
  for (DType t : kAllDTypes) {
    if (dtype_name(t) == name) return t;
  }
  for (const auto& [alias, t] : kAliases) {
    if (alias == name) return t;
  }
  return std::nullopt;
}

}  // namespace tdist
