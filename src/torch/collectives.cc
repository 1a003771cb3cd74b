// Tensor collectives (collectives.h): argument checks, then each operation on buffers
// staged by tensor_work.h, whose Work copies results into the caller's tensors.
#include "tdist/torch/collectives.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/torch/types.h"
#include "tensor_checks.h"
#include "tensor_work.h"

namespace tdist::torch {
namespace {

using checks::check_like;
using checks::check_list;
using checks::check_tensor;
using checks::count_of;
using checks::staging;
using tdist::detail::str_cat;
using ::torch::Tensor;

constexpr bool kTorchCuda = TDIST_TORCH_CUDA != 0;

void check_rank(const char* op, const char* what, int r, const ProcessGroup& pg) {
  TDIST_CHECK(r >= 0 && r < pg.size(), InvalidArgument, op, ": ", what, " ", r,
              " is not a rank of the group (0..", pg.size() - 1, ")");
}

void check_empty_off_root(const char* op, const char* what, const std::vector<Tensor>& list,
                          const char* root_name, int root, const ProcessGroup& pg) {
  TDIST_CHECK(list.empty(), InvalidArgument, op, ": ", what, " must be empty on ranks other than ",
              root_name, " (", root, "); rank ", pg.rank(), " was given ", list.size(), " tensors");
}

// TDIST_DEBUG=detail: the shape of `t` joins the fingerprint of the collective issued while the
// result lives (ProcessGroup's detail check compares it across ranks). all_to_all's tensors
// may differ between ranks and have none.
std::optional<CollectiveDetail> shape_detail(const ProcessGroup& pg, const Tensor& t) {
  if (!pg.debug_detail()) return std::nullopt;
  return std::optional<CollectiveDetail>(std::in_place, str_cat("shape ", t.sizes()));
}

// Element counts per rank of all_to_all_single's `t` split along dim 0 by `splits`.
std::vector<size_t> split_counts(const char* what, const Tensor& t,
                                 const std::vector<int64_t>& splits, int n) {
  constexpr const char* kOp = "all_to_all_single";
  TDIST_CHECK(t.dim() >= 1, InvalidArgument, kOp, ": ", what,
              " is a 0-dim tensor; it needs a dim 0 to split");
  const int64_t rows = t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> counts(static_cast<size_t>(n));
  if (splits.empty()) {
    TDIST_CHECK(rows % n == 0, InvalidArgument, kOp, ": ", what, ".size(0) = ", rows,
                " does not divide evenly among ", n, " ranks; give its split sizes");
    std::fill(counts.begin(), counts.end(), static_cast<size_t>(rows / n * row));
    return counts;
  }
  TDIST_CHECK(splits.size() == static_cast<size_t>(n), InvalidArgument, kOp, ": ", what,
              " split sizes hold ", splits.size(), " entries; the group has ", n, " ranks");
  int64_t sum = 0;
  for (size_t p = 0; p < splits.size(); ++p) {
    TDIST_CHECK(splits[p] >= 0, InvalidArgument, kOp, ": ", what, " split size ", p, " is ",
                splits[p]);
    sum += splits[p];
    counts[p] = static_cast<size_t>(splits[p] * row);
  }
  TDIST_CHECK(sum == rows, InvalidArgument, kOp, ": ", what, " split sizes add up to ", sum,
              " but ", what, ".size(0) is ", rows);
  return counts;
}

}  // namespace

std::string detail::device_error(const c10::Device& device) {
  return str_cat("tdist: ", c10::DeviceTypeName(device.type()),
                 " tensors are not supported (tensor on ", device.str(), "); move it to the CPU",
                 kTorchCuda ? " or a CUDA device"
                            : " (tdist_torch was built against a LibTorch without CUDA)");
}

std::shared_ptr<ProcessGroup> Group::resolve(const char* op) const {
  if (!given_) return get_default_group();
  TDIST_CHECK(group_ != nullptr, InvalidArgument, op,
              ": the group is null; new_group() and split() return null on ranks that are not "
              "members, and those ranks must not call the group's collectives");
  return group_;
}

// ---- collectives ----------------------------------------------------------------------

WorkPtr all_reduce_async(const Tensor& tensor, ReduceOp op, Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_reduce";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, tensor);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s = staging(kOp, *pg, {&tensor});
  void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/true);
  return launch(kOp, std::move(s),
                [&] { return pg->all_reduce(data, data, count_of(tensor), dtype, op); });
}

WorkPtr broadcast_async(const Tensor& tensor, int src, Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "broadcast";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, tensor);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  check_rank(kOp, "src", src, *pg);
  Staging s = staging(kOp, *pg, {&tensor});
  // The source only reads its tensor.
  void* data = pg->rank() == src ? const_cast<void*>(stage_input(s, tensor))
                                 : stage_output(s, kOp, "tensor", tensor, /*keep_values=*/false);
  return launch(kOp, std::move(s),
                [&] { return pg->broadcast(data, count_of(tensor), dtype, src); });
}

WorkPtr reduce_async(const Tensor& tensor, int dst, ReduceOp op, Group group,
                     SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "reduce";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, tensor);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  check_rank(kOp, "dst", dst, *pg);
  Staging s = staging(kOp, *pg, {&tensor});
  if (pg->rank() == dst) {
    void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/true);
    return launch(kOp, std::move(s),
                  [&] { return pg->reduce(data, data, count_of(tensor), dtype, op, dst); });
  }
  const void* send = stage_input(s, tensor);
  return launch(kOp, std::move(s),
                [&] { return pg->reduce(send, nullptr, count_of(tensor), dtype, op, dst); });
}

WorkPtr all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input, Group group,
                         SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_gather";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, input);
  const DType dtype = check_tensor(kOp, "input", input);
  check_list(kOp, "outputs", outputs, *pg, "input", input, /*same_shape=*/true);
  Staging s = staging(kOp, *pg, {&input}, {&outputs});
  const void* send = stage_input(s, input);
  void* recv = stage_outputs(s, kOp, "outputs", outputs, input.scalar_type());
  return launch(kOp, std::move(s),
                [&] { return pg->all_gather(send, recv, count_of(input), dtype); });
}

WorkPtr all_gather_into_tensor_async(const Tensor& output, const Tensor& input, Group group,
                                     SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_gather_into_tensor";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, input);
  const DType dtype = check_tensor(kOp, "input", input);
  check_like(kOp, "output", output, "input", input, /*same_shape=*/false);
  const size_t count = count_of(input);
  TDIST_CHECK(count_of(output) == count * static_cast<size_t>(pg->size()), InvalidArgument, kOp,
              ": output has ", output.numel(), " elements; it needs ", pg->size(), " x ", count,
              " (the group's size times input's)");
  Staging s = staging(kOp, *pg, {&output, &input});
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const size_t block = count * input.element_size();
  const void* own = static_cast<std::byte*>(recv) + static_cast<size_t>(pg->rank()) * block;
  const bool in_place = !needs_staging(s, input) && input.data_ptr() == own;
  const void* send = in_place ? own : stage_input_apart(s, input, recv, block * pg->size());
  return launch(kOp, std::move(s), [&] { return pg->all_gather(send, recv, count, dtype); });
}

WorkPtr gather_async(const Tensor& input, const std::vector<Tensor>& gather_list, int dst,
                     Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "gather";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, input);
  const DType dtype = check_tensor(kOp, "input", input);
  check_rank(kOp, "dst", dst, *pg);
  Staging s = staging(kOp, *pg, {&input}, {&gather_list});
  void* recv = nullptr;
  if (pg->rank() == dst) {
    check_list(kOp, "gather_list", gather_list, *pg, "input", input, /*same_shape=*/true);
    recv = stage_outputs(s, kOp, "gather_list", gather_list, input.scalar_type());
  } else {
    check_empty_off_root(kOp, "gather_list", gather_list, "dst", dst, *pg);
  }
  const void* send = stage_input(s, input);
  return launch(kOp, std::move(s),
                [&] { return pg->gather(send, recv, count_of(input), dtype, dst); });
}

WorkPtr scatter_async(const Tensor& output, const std::vector<Tensor>& scatter_list, int src,
                      Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "scatter";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, output);
  const DType dtype = check_tensor(kOp, "output", output);
  check_rank(kOp, "src", src, *pg);
  Staging s = staging(kOp, *pg, {&output}, {&scatter_list});
  const void* send = nullptr;
  if (pg->rank() == src) {
    check_list(kOp, "scatter_list", scatter_list, *pg, "output", output, /*same_shape=*/true);
    send = stage_inputs(s, scatter_list, output.scalar_type());
  } else {
    check_empty_off_root(kOp, "scatter_list", scatter_list, "src", src, *pg);
  }
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  return launch(kOp, std::move(s),
                [&] { return pg->scatter(send, recv, count_of(output), dtype, src); });
}

WorkPtr reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                             Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "reduce_scatter";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, output);
  const DType dtype = check_tensor(kOp, "output", output);
  check_list(kOp, "inputs", inputs, *pg, "output", output, /*same_shape=*/true);
  Staging s = staging(kOp, *pg, {&output}, {&inputs});
  const void* send = stage_inputs(s, inputs, output.scalar_type());
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  return launch(kOp, std::move(s),
                [&] { return pg->reduce_scatter(send, recv, count_of(output), dtype, op); });
}

WorkPtr reduce_scatter_tensor_async(const Tensor& output, const Tensor& input, ReduceOp op,
                                    Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "reduce_scatter_tensor";
  auto pg = group.resolve(kOp);
  const auto shape = shape_detail(*pg, output);
  const DType dtype = check_tensor(kOp, "output", output);
  check_like(kOp, "input", input, "output", output, /*same_shape=*/false);
  const size_t count = count_of(output);
  TDIST_CHECK(count_of(input) == count * static_cast<size_t>(pg->size()), InvalidArgument, kOp,
              ": input has ", input.numel(), " elements; it needs ", pg->size(), " x ", count,
              " (the group's size times output's)");
  Staging s = staging(kOp, *pg, {&output, &input});
  const size_t block = count * output.element_size();
  const bool in_place = !needs_staging(s, input) && !needs_staging(s, output) &&
                        output.data_ptr() == static_cast<std::byte*>(input.data_ptr()) +
                                                 static_cast<size_t>(pg->rank()) * block;
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const void* send = in_place ? stage_input(s, input) : stage_input_apart(s, input, recv, block);
  return launch(kOp, std::move(s),
                [&] { return pg->reduce_scatter(send, recv, count, dtype, op); });
}

WorkPtr all_to_all_async(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         Group group, SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_to_all";
  auto pg = group.resolve(kOp);
  TDIST_CHECK(!inputs.empty(), InvalidArgument, kOp,
              ": inputs is empty; it needs one tensor per "
              "rank of the group (",
              pg->size(), ")");
  const DType dtype = check_tensor(kOp, "inputs[0]", inputs[0]);
  check_list(kOp, "inputs", inputs, *pg, "inputs[0]", inputs[0], /*same_shape=*/false);
  check_list(kOp, "outputs", outputs, *pg, "inputs[0]", inputs[0], /*same_shape=*/false);
  const auto me = static_cast<size_t>(pg->rank());
  TDIST_CHECK(outputs[me].numel() == inputs[me].numel(), InvalidArgument, kOp, ": rank ", me,
              " sends itself inputs[", me, "] of ", inputs[me].numel(), " elements into outputs[",
              me, "] of ", outputs[me].numel());
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  for (const Tensor& t : inputs) send_counts.push_back(count_of(t));
  for (const Tensor& t : outputs) recv_counts.push_back(count_of(t));
  Staging s = staging(kOp, *pg, {}, {&outputs, &inputs});
  const void* send = stage_inputs(s, inputs, inputs[0].scalar_type());
  void* recv = stage_outputs(s, kOp, "outputs", outputs, inputs[0].scalar_type());
  // Always the variable-size form: ranks whose own counts happen to be even must still
  // issue the same operation as the others.
  return launch(kOp, std::move(s),
                [&] { return pg->all_to_allv(send, send_counts, recv, recv_counts, dtype); });
}

WorkPtr all_to_all_single_async(const Tensor& output, const Tensor& input,
                                const std::vector<int64_t>& output_split_sizes,
                                const std::vector<int64_t>& input_split_sizes, Group group,
                                SourceLocation where) {
  const CallSite site(where);
  constexpr const char* kOp = "all_to_all_single";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "input", input);
  check_like(kOp, "output", output, "input", input, /*same_shape=*/false);
  const std::vector<size_t> send_counts =
      split_counts("input", input, input_split_sizes, pg->size());
  const std::vector<size_t> recv_counts =
      split_counts("output", output, output_split_sizes, pg->size());
  const auto me = static_cast<size_t>(pg->rank());
  TDIST_CHECK(send_counts[me] == recv_counts[me], InvalidArgument, kOp, ": rank ", me,
              " sends itself ", send_counts[me], " elements but expects ", recv_counts[me]);
  Staging s = staging(kOp, *pg, {&output, &input});
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const void* send = stage_input_apart(s, input, recv, count_of(output) * output.element_size());
  return launch(kOp, std::move(s),
                [&] { return pg->all_to_allv(send, send_counts, recv, recv_counts, dtype); });
}

WorkPtr isend(const Tensor& tensor, int dst, Group group, uint32_t tag) {
  constexpr const char* kOp = "isend";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s = staging(kOp, *pg, {&tensor});
  const void* data = stage_input(s, tensor);
  return launch(kOp, std::move(s),
                [&] { return pg->isend(data, count_of(tensor), dtype, dst, tag); });
}

WorkPtr irecv(const Tensor& tensor, int src, Group group, uint32_t tag) {
  constexpr const char* kOp = "irecv";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s = staging(kOp, *pg, {&tensor});
  void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/false);
  return launch(kOp, std::move(s),
                [&] { return pg->irecv(data, count_of(tensor), dtype, src, tag); });
}

WorkPtr batch_isend_irecv(const std::vector<P2POp>& ops, Group group) {
  constexpr const char* kOp = "batch_isend_irecv";
  auto pg = group.resolve(kOp);
  TDIST_CHECK(!ops.empty(), InvalidArgument, kOp, ": the list of operations is empty");
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<const Tensor*> tensors;
  for (size_t i = 0; i < ops.size(); ++i) {
    names.push_back(str_cat("ops[", i, "].tensor"));
    dtypes.push_back(check_tensor(kOp, names.back(), ops[i].tensor));
    tensors.push_back(&ops[i].tensor);
  }
  Staging s = open_staging(kOp, *pg, tensors);
  std::vector<tdist::P2POp> raw;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const bool send = op.kind == P2POp::Kind::kSend;
    void* data = send ? const_cast<void*>(stage_input(s, op.tensor))
                      : stage_output(s, kOp, names[i].c_str(), op.tensor, /*keep_values=*/false);
    raw.push_back({send ? tdist::P2POp::Kind::kSend : tdist::P2POp::Kind::kRecv, data,
                   count_of(op.tensor), dtypes[i], op.peer, op.tag});
  }
  return launch(kOp, std::move(s), [&] { return pg->batch_isend_irecv(raw); });
}

WorkPtr irecv_any(const Tensor& tensor, Group group, uint32_t tag) {
  constexpr const char* kOp = "irecv_any";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s = staging(kOp, *pg, {&tensor});
  void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/false);
  return launch(kOp, std::move(s),
                [&] { return pg->irecv_any(data, count_of(tensor), dtype, tag); });
}

WorkPtr barrier_async(Group group, SourceLocation where) {
  const CallSite site(where);
  auto pg = group.resolve("barrier");
  return launch("barrier", Staging{}, [&] { return pg->barrier(); });
}

// ---- blocking forms (CallerWaits: the async form finishes before it returns) ----------

void all_reduce(const Tensor& tensor, ReduceOp op, Group group, SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  all_reduce_async(tensor, op, std::move(group))->wait();
}
void broadcast(const Tensor& tensor, int src, Group group, SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  broadcast_async(tensor, src, std::move(group))->wait();
}
void reduce(const Tensor& tensor, int dst, ReduceOp op, Group group, SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  reduce_async(tensor, dst, op, std::move(group))->wait();
}
void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, Group group,
                SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  all_gather_async(outputs, input, std::move(group))->wait();
}
void all_gather_into_tensor(const Tensor& output, const Tensor& input, Group group,
                            SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  all_gather_into_tensor_async(output, input, std::move(group))->wait();
}
void gather(const Tensor& input, const std::vector<Tensor>& gather_list, int dst, Group group,
            SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  gather_async(input, gather_list, dst, std::move(group))->wait();
}
void scatter(const Tensor& output, const std::vector<Tensor>& scatter_list, int src, Group group,
             SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  scatter_async(output, scatter_list, src, std::move(group))->wait();
}
void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                    Group group, SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  reduce_scatter_async(output, inputs, op, std::move(group))->wait();
}
void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, Group group,
                           SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  reduce_scatter_tensor_async(output, input, op, std::move(group))->wait();
}
void all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, Group group,
                SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  all_to_all_async(outputs, inputs, std::move(group))->wait();
}
void all_to_all_single(const Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes, Group group,
                       SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  all_to_all_single_async(output, input, output_split_sizes, input_split_sizes, std::move(group))
      ->wait();
}
void send(const Tensor& tensor, int dst, Group group, uint32_t tag) {
  CallerWaits waits;
  isend(tensor, dst, std::move(group), tag)->wait();
}
void recv(const Tensor& tensor, int src, Group group, uint32_t tag) {
  CallerWaits waits;
  irecv(tensor, src, std::move(group), tag)->wait();
}
int recv_any(const Tensor& tensor, Group group, uint32_t tag) {
  CallerWaits waits;
  WorkPtr work = irecv_any(tensor, std::move(group), tag);
  work->wait();
  return work->source_rank();
}
void barrier(Group group, SourceLocation where) {
  const CallSite site(where);
  CallerWaits waits;
  barrier_async(std::move(group))->wait();
}

}  // namespace tdist::torch
