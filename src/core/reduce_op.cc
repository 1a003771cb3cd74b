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

bool is_supported(ReduceOpKind op, DType dtype) {
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

void validate(ReduceOp op, DType dtype) {
  if (is_supported(op.kind, dtype)) return;
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

}  // namespace tdist
