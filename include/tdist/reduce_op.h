// Reduce operations, as torch.distributed.ReduceOp names them.
//
// kSum, kProd, kMin, kMax   every dtype (for bool: sum and max are OR, prod and min AND)
// kAvg                      floating and integer types (integers divide truncating)
// kBand, kBor, kBxor        integer types and bool only
// kPremulSum                floating types: each rank's input is multiplied by `scale`,
//                           then summed (ReduceOp::premul_sum(s))
//
// validate(op, dtype) throws InvalidArgument for a combination that is not supported.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tdist/dtype.h"

namespace tdist {

enum class ReduceOpKind : uint8_t { kSum, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor, kPremulSum };

inline constexpr ReduceOpKind kAllReduceOpKinds[] = {
    ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin,
    ReduceOpKind::kMax, ReduceOpKind::kAvg,  ReduceOpKind::kBand,
    ReduceOpKind::kBor, ReduceOpKind::kBxor, ReduceOpKind::kPremulSum};

struct ReduceOp {
  ReduceOpKind kind = ReduceOpKind::kSum;
  double scale = 1.0;  // only meaningful for kPremulSum

  constexpr ReduceOp() = default;
  constexpr ReduceOp(ReduceOpKind k) : kind(k) {}  // NOLINT(google-explicit-constructor)

  static constexpr ReduceOp premul_sum(double s) {
    ReduceOp op(ReduceOpKind::kPremulSum);
    op.scale = s;
    return op;
  }

  friend constexpr bool operator==(const ReduceOp&, const ReduceOp&) = default;
};

// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "premul_sum".
std::string_view reduce_op_name(ReduceOpKind k);

// Parses a name above (case-insensitive; torch's upper-case names too).
std::optional<ReduceOpKind> parse_reduce_op(std::string_view name);

// True when `op` can reduce elements of `dtype`.
constexpr bool is_supported(ReduceOpKind op, DType dtype) {
  switch (op) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kProd:
    case ReduceOpKind::kMin:
    case ReduceOpKind::kMax:
      return true;
    case ReduceOpKind::kAvg:
      return dtype != DType::kBool;
    case ReduceOpKind::kBand:
    case ReduceOpKind::kBor:
    case ReduceOpKind::kBxor:
      return !is_floating(dtype);
    case ReduceOpKind::kPremulSum:
      return is_floating(dtype);
  }
  return false;
}

namespace detail {
// Throws the InvalidArgument of validate() for an unsupported pair.
[[noreturn]] void reject_reduce_op(ReduceOp op, DType dtype);
}  // namespace detail

// Throws InvalidArgument naming the op and dtype when !is_supported(op.kind, dtype). Inline:
// every collective checks its op, and the kernels check again.
inline void validate(ReduceOp op, DType dtype) {
  if (!is_supported(op.kind, dtype)) [[unlikely]]
    detail::reject_reduce_op(op, dtype);
}

}  // namespace tdist
