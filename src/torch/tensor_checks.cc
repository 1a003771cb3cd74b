// The tensor collectives' shared checks (tensor_checks.h).
#include "tensor_checks.h"

#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch::checks {
namespace {

using tdist::detail::str_cat;
using ::torch::Tensor;

constexpr bool kTorchCuda = TDIST_TORCH_CUDA != 0;

}  // namespace

DType check_tensor(const char* op, const std::string& what, const Tensor& t) {
  TDIST_CHECK(t.defined(), InvalidArgument, op, ": ", what, " is an undefined tensor");
  TDIST_CHECK(t.device().is_cpu() || (kTorchCuda && t.device().is_cuda()), InvalidArgument,
              detail::device_error(t.device()), " (", op, ": ", what, ")");
  TDIST_CHECK(t.layout() == ::torch::kStrided, InvalidArgument, op, ": ", what, " has layout ",
              t.layout(), "; only dense (strided) tensors are supported");
  try {
    return to_dtype(t.scalar_type());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat(op, ": ", what, ": ", e.what()));
  }
}

void check_like(const char* op, const std::string& what, const Tensor& t, const char* ref_name,
                const Tensor& ref, bool same_shape) {
  check_tensor(op, what, t);
  TDIST_CHECK(t.scalar_type() == ref.scalar_type(), InvalidArgument, op, ": ", what, " has dtype ",
              t.scalar_type(), " but ", ref_name, " has ", ref.scalar_type());
  TDIST_CHECK(!same_shape || t.sizes() == ref.sizes(), InvalidArgument, op, ": ", what,
              " has shape ", t.sizes(), " but ", ref_name, " has ", ref.sizes());
}

void check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                const ProcessGroup& pg, const char* ref_name, const Tensor& ref, bool same_shape) {
  TDIST_CHECK(list.size() == static_cast<size_t>(pg.size()), InvalidArgument, op, ": ", what,
              " holds ", list.size(), " tensors; it needs one per rank of the group (", pg.size(),
              ")");
  for (size_t i = 0; i < list.size(); ++i) {
    check_like(op, str_cat(what, "[", i, "]"), list[i], ref_name, ref, same_shape);
  }
}

Staging staging(const char* op, const ProcessGroup& pg, std::initializer_list<const Tensor*> ones,
                std::initializer_list<const std::vector<Tensor>*> lists) {
  std::vector<const Tensor*> all(ones);
  for (const std::vector<Tensor>* list : lists) {
    for (const Tensor& t : *list) all.push_back(&t);
  }
  return open_staging(op, pg, all);
}

}  // namespace tdist::torch::checks
