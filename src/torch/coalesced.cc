// The coalesced tensor collectives and the sparse all_reduce (collectives.h): many tensors
// as one operation of the group, through one staged buffer each way (tensor_work.h).
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"
#include "tensor_checks.h"
#include "tensor_work.h"

namespace tdist::torch {
namespace {

using tdist::detail::str_cat;
using ::torch::Tensor;

// Every tensor of `list` has list[0]'s dtype (any shape); its DType. `op` and `what` name
// them in the InvalidArgument.
DType check_one_dtype(const char* op, const char* what, const std::vector<Tensor>& list) {
  TDIST_CHECK(!list.empty(), InvalidArgument, op, ": ", what, " is empty");
  const DType dtype = checks::check_tensor(op, str_cat(what, "[0]"), list[0]);
  for (size_t i = 1; i < list.size(); ++i) {
    checks::check_like(op, str_cat(what, "[", i, "]"), list[i], "the first", list[0], false);
  }
  return dtype;
}

int64_t numel_sum(const std::vector<Tensor>& list) {
  int64_t n = 0;
  for (const Tensor& t : list) n += t.numel();
  return n;
}

// outputs[i] holds `factor` times inputs[i]'s elements, in inputs[i]'s dtype.
void check_pairs(const char* op, const std::vector<Tensor>& outputs,
                 const std::vector<Tensor>& inputs, int64_t out_factor, int64_t in_factor) {
  TDIST_CHECK(outputs.size() == inputs.size(), InvalidArgument, op, ": ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checks::check_like(op, str_cat("outputs[", i, "]"), outputs[i], "the inputs", inputs[0], false);
    TDIST_CHECK(outputs[i].numel() * in_factor == inputs[i].numel() * out_factor, InvalidArgument,
                op, ": outputs[", i, "] has ", outputs[i].numel(), " elements and inputs[", i, "] ",
                inputs[i].numel(), "; the ", out_factor > 1 ? "output" : "input",
                " must hold group size (", std::max(out_factor, in_factor), ") times the ",
                out_factor > 1 ? "input's" : "output's");
  }
}

}  // namespace

WorkPtr all_reduce_coalesced_async(const std::vector<Tensor>& tensors, ReduceOp op, Group group,
                                   SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_reduce_coalesced";
  auto pg = group.resolve(kOp);
  const DType dtype = check_one_dtype(kOp, "tensors", tensors);
  Staging s = checks::staging(kOp, *pg, {}, {&tensors});
  void* buf = stage_outputs(s, kOp, "tensors", tensors, tensors[0].scalar_type());
  {
    ::torch::NoGradGuard no_grad;
    Tensor flat = s.keep.back();
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t, s.mode == StageMode::kStaged);
      offset += t.numel();
    }
  }
  const auto count = static_cast<size_t>(numel_sum(tensors));
  return launch(kOp, std::move(s), [&] { return pg->all_reduce(buf, buf, count, dtype, op); });
}

WorkPtr all_gather_coalesced_async(const std::vector<std::vector<Tensor>>& outputs,
                                   const std::vector<Tensor>& inputs, Group group,
                                   SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_gather_coalesced";
  auto pg = group.resolve(kOp);
  const DType dtype = check_one_dtype(kOp, "inputs", inputs);
  TDIST_CHECK(outputs.size() == static_cast<size_t>(pg->size()), InvalidArgument, kOp,
              ": outputs holds ", outputs.size(), " lists; it needs one per rank of the group (",
              pg->size(), ")");
  std::vector<Tensor> blocks;  // rank-major: rank r's inputs back to back
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_pairs(kOp, outputs[r], inputs, 1, 1);
    blocks.insert(blocks.end(), outputs[r].begin(), outputs[r].end());
  }
  Staging s = checks::staging(kOp, *pg, {}, {&inputs, &blocks});
  const void* send = stage_inputs(s, inputs, inputs[0].scalar_type());
  void* recv = stage_outputs(s, kOp, "outputs", blocks, inputs[0].scalar_type());
  const auto count = static_cast<size_t>(numel_sum(inputs));
  return launch(kOp, std::move(s), [&] { return pg->all_gather(send, recv, count, dtype); });
}

WorkPtr all_gather_into_tensor_coalesced_async(const std::vector<Tensor>& outputs,
                                               const std::vector<Tensor>& inputs, Group group,
                                               SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_gather_into_tensor_coalesced";
  auto pg = group.resolve(kOp);
  const DType dtype = check_one_dtype(kOp, "inputs", inputs);
  const int n = pg->size();
  check_pairs(kOp, outputs, inputs, n, 1);
  // Rank r's block of output i is inputs[i]'s size; a non-contiguous output gets its
  // blocks in a contiguous tensor, copied into it after them.
  std::vector<Tensor> dense(outputs.size());
  std::vector<Tensor> blocks;
  for (size_t i = 0; i < outputs.size(); ++i) {
    dense[i] = outputs[i].is_contiguous()
                   ? outputs[i]
                   : at::empty_like(outputs[i], at::MemoryFormat::Contiguous);
  }
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      blocks.push_back(dense[i].view({n, inputs[i].numel()}).select(0, r));
    }
  }
  Staging s = checks::staging(kOp, *pg, {}, {&inputs, &outputs});
  const void* send = stage_inputs(s, inputs, inputs[0].scalar_type());
  void* recv = stage_outputs(s, kOp, "outputs", blocks, inputs[0].scalar_type());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!dense[i].is_same(outputs[i])) {
      s.keep.push_back(dense[i]);
      s.copy_back.emplace_back(outputs[i], dense[i]);
    }
  }
  const auto count = static_cast<size_t>(numel_sum(inputs));
  return launch(kOp, std::move(s), [&] { return pg->all_gather(send, recv, count, dtype); });
}

WorkPtr reduce_scatter_tensor_coalesced_async(const std::vector<Tensor>& outputs,
                                              const std::vector<Tensor>& inputs, ReduceOp op,
                                              Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "reduce_scatter_tensor_coalesced";
  auto pg = group.resolve(kOp);
  const DType dtype = check_one_dtype(kOp, "inputs", inputs);
  const int n = pg->size();
  check_pairs(kOp, outputs, inputs, 1, n);
  std::vector<Tensor> blocks;  // rank-major: block r of every input back to back
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      blocks.push_back(inputs[i].reshape({n, outputs[i].numel()}).select(0, r));
    }
  }
  Staging s = checks::staging(kOp, *pg, {}, {&inputs, &outputs});
  const void* send = stage_inputs(s, blocks, inputs[0].scalar_type());
  void* recv = stage_outputs(s, kOp, "outputs", outputs, inputs[0].scalar_type());
  const auto count = static_cast<size_t>(numel_sum(outputs));
  return launch(kOp, std::move(s),
                [&] { return pg->reduce_scatter(send, recv, count, dtype, op); });
}

Tensor all_reduce_sparse(const Tensor& tensor, Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_reduce_sparse";
  auto pg = group.resolve(kOp);
  TDIST_CHECK(tensor.defined() && tensor.layout() == ::torch::kSparse, InvalidArgument, kOp,
              ": the tensor must be a sparse COO tensor");
  TDIST_CHECK(tensor.device().is_cpu(), InvalidArgument, detail::device_error(tensor.device()),
              " (", kOp, ")");
  const DType dtype = to_dtype(tensor.scalar_type());
  const Tensor c = tensor.coalesce();
  const Tensor indices = c.indices().t().contiguous();  // [nnz, sparse_dim]
  const Tensor values = c.values().contiguous();        // [nnz, dense dims...]
  const int n = pg->size();

  // Every rank's shape and nnz: the shapes must agree.
  std::vector<int64_t> meta = {tensor.sparse_dim(), tensor.dense_dim(), c._nnz()};
  for (int64_t d : tensor.sizes()) meta.push_back(d);
  const auto m = static_cast<int64_t>(meta.size());
  Tensor lengths = ::torch::empty({n}, ::torch::kLong);
  pg->all_gather(&m, lengths.data_ptr(), 1, DType::kI64)->wait();
  for (int r = 0; r < n; ++r) {
    TDIST_CHECK(lengths[r].item<int64_t>() == m, InvalidArgument, kOp, ": rank ", r,
                "'s sparse tensor has ", lengths[r].item<int64_t>() - 3, " dimensions but rank ",
                pg->rank(), "'s has ", m - 3);
  }
  Tensor metas = ::torch::empty({n, m}, ::torch::kLong);
  Tensor mine = ::torch::tensor(meta, ::torch::kLong);
  pg->all_gather(mine.data_ptr(), metas.data_ptr(), meta.size(), DType::kI64)->wait();
  std::vector<size_t> index_counts(n);
  std::vector<size_t> value_counts(n);
  int64_t value_row = 1;  // elements per non-zero: the dense dimensions'
  for (int64_t d : values.sizes().slice(1)) value_row *= d;
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    const Tensor theirs = metas[r];
    TDIST_CHECK(::torch::equal(theirs.narrow(0, 0, 2), mine.narrow(0, 0, 2)) &&
                    ::torch::equal(theirs.narrow(0, 3, m - 3), mine.narrow(0, 3, m - 3)),
                InvalidArgument, kOp, ": rank ", r, " has a sparse tensor of shape ",
                c10::IntArrayRef(theirs.data_ptr<int64_t>() + 3, static_cast<size_t>(m - 3)),
                " (sparse_dim ", theirs[0].item<int64_t>(), ") but rank ", pg->rank(), " has ",
                tensor.sizes(), " (sparse_dim ", tensor.sparse_dim(), ")");
    const int64_t nnz = theirs[2].item<int64_t>();
    index_counts[r] = static_cast<size_t>(nnz * tensor.sparse_dim());
    value_counts[r] = static_cast<size_t>(nnz * value_row);
    total += nnz;
  }
  Tensor all_indices = ::torch::empty({total, tensor.sparse_dim()}, ::torch::kLong);
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = total;
  Tensor all_values = ::torch::empty(value_shape, values.options());
  pg->all_gatherv(indices.data_ptr(), static_cast<size_t>(indices.numel()), all_indices.data_ptr(),
                  index_counts, DType::kI64)
      ->wait();
  pg->all_gatherv(values.data_ptr(), static_cast<size_t>(values.numel()), all_values.data_ptr(),
                  value_counts, dtype)
      ->wait();
  return ::torch::sparse_coo_tensor(all_indices.t(), all_values, tensor.sizes()).coalesce();
}

}  // namespace tdist::torch
