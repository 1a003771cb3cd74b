#include "tdist/reduce_op.h"

#include <cctype>
#include <string>

#include "tdist/error.h"

namespace tdist {

std::string_view reduce_op_name(ReduceOpKind k) {
  switch (k) {
    case ReduceOpKind::kSum:
      return "sum";
    case ReduceOpKind::kProd:
      return "prod";
    case ReduceOpKind::kMin:
      return "min";
    case ReduceOpKind::kMax:
      return "max";
    case ReduceOpKind::kAvg:
      return "avg";
    case ReduceOpKind::kBand:
      return "band";
    case ReduceOpKind::kBor:
      return "bor";
    case ReduceOpKind::kBxor:
      return "bxor";
    case ReduceOpKind::kPremulSum:
      return "premul_sum";
  }
  return "?";
}

std::optional<ReduceOpKind> parse_reduce_op(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "product") return ReduceOpKind::kProd;
  if (lower == "average" || lower == "mean") return ReduceOpKind::kAvg;
  for (ReduceOpKind k : kAllReduceOpKinds) {
    if (reduce_op_name(k) == lower) return k;
  }
  return std::nullopt;
}

namespace detail {

void reject_reduce_op(ReduceOp op, DType dtype) {
  const char* why = "";
  switch (op.kind) {
    case ReduceOpKind::kBand:
    case ReduceOpKind::kBor:
    case ReduceOpKind::kBxor:
      why = "bitwise ops need an integer or bool dtype";
      break;
    case ReduceOpKind::kPremulSum:
      why = "premul_sum needs a floating dtype";
      break;
    case ReduceOpKind::kAvg:
      why = "avg is not defined for bool";
      break;
    default:
      break;
  }
  TDIST_THROW(InvalidArgument, "reduce op '", reduce_op_name(op.kind),
              "' is not supported for dtype ", dtype_name(dtype), ": ", why);
}

}  // namespace detail

}  // namespace tdist
