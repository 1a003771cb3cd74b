// Tensor collectives (collectives.h): argument checks, contiguous staging of inputs and
// outputs, and the Work that copies results into the caller's tensors on completion.
#include "tdist/torch/collectives.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

using tdist::detail::str_cat;
using ::torch::Tensor;

// Every buffer an operation's raw pointers point into, and the copies into the caller's
// tensors to make once it succeeded.
struct Staging {
  std::vector<Tensor> keep;
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (caller's tensor, result)
};

// Unfinished operations whose Work was dropped, holding their buffers until they
// complete; pruned whenever an operation starts. Never destroyed, so that an operation
// still running while the process exits does not write into freed memory.
class Orphans {
 public:
  static Orphans& get() {
    static auto* orphans = new Orphans;
    return *orphans;
  }

  void adopt(WorkPtr work, std::vector<Tensor> keep) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.emplace_back(std::move(work), std::move(keep));
  }

  void prune() {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(pending_, [](const auto& p) { return p.first->is_completed(); });
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<WorkPtr, std::vector<Tensor>>> pending_;  // guarded by mu_
};

// Wraps the process group's Work: completes when it does, after the copy-back.
class TensorWork final : public Work {
 public:
  TensorWork(const char* op, WorkPtr inner, Staging staging)
      : Work(op), inner_(std::move(inner)), staging_(std::move(staging)) {}

  ~TensorWork() override {
    if (!inner_->is_completed()) Orphans::get().adopt(std::move(inner_), std::move(staging_.keep));
  }

 protected:
  void poll(Deadline deadline) override {
    if (!inner_done(deadline)) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    std::exception_ptr error = inner_->exception();
    if (error == nullptr) {
      try {
        copy_back();
      } catch (...) {
        error = std::current_exception();
      }
    }
    staging_ = {};  // the temporaries are not needed any more
    finished_ = true;
    finish(error);
  }

 private:
  // Waits for the inner Work until `deadline`; true once it completed (either way).
  bool inner_done(Deadline deadline) {
    if (!deadline.is_never() && deadline.time() <= Clock::now()) return inner_->is_completed();
    try {
      inner_->wait(deadline);
    } catch (...) {
      // Its error is read from exception() once complete; a passed deadline leaves it running.
    }
    return inner_->is_completed();
  }

  // Writes outside autograd (as the operation's own writes through data pointers are);
  // an inference tensor only accepts writes inside InferenceMode. InferenceMode(false)
  // turns grad mode on, so NoGradGuard comes after it.
  void copy_back() {
    for (auto& [dst, src] : staging_.copy_back) {
      c10::InferenceMode inference(dst.is_inference());
      ::torch::NoGradGuard no_grad;
      dst.copy_(src);
    }
  }

  WorkPtr inner_;
  std::mutex mu_;
  bool finished_ = false;  // guarded by mu_
  Staging staging_;        // guarded by mu_ once the Work is shared
};

WorkPtr launch(const char* op, WorkPtr inner, Staging staging) {
  Orphans::get().prune();
  return std::make_shared<TensorWork>(op, std::move(inner), std::move(staging));
}

// ---- checks ---------------------------------------------------------------------------

DType check_tensor(const char* op, const std::string& what, const Tensor& t) {
  TDIST_CHECK(t.defined(), InvalidArgument, op, ": ", what, " is an undefined tensor");
  TDIST_CHECK(t.device().is_cpu(), InvalidArgument, detail::device_error(t.device()), " (", op,
              ": ", what, ")");
  TDIST_CHECK(t.layout() == ::torch::kStrided, InvalidArgument, op, ": ", what, " has layout ",
              t.layout(), "; only dense (strided) tensors are supported");
  try {
    return to_dtype(t.scalar_type());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat(op, ": ", what, ": ", e.what()));
  }
}

// `t` must have `ref`'s dtype, and its shape when `same_shape`.
void check_like(const char* op, const std::string& what, const Tensor& t, const char* ref_name,
                const Tensor& ref, bool same_shape) {
  check_tensor(op, what, t);
  TDIST_CHECK(t.scalar_type() == ref.scalar_type(), InvalidArgument, op, ": ", what, " has dtype ",
              t.scalar_type(), " but ", ref_name, " has ", ref.scalar_type());
  TDIST_CHECK(!same_shape || t.sizes() == ref.sizes(), InvalidArgument, op, ": ", what,
              " has shape ", t.sizes(), " but ", ref_name, " has ", ref.sizes());
}

// One tensor per rank of `pg`, each checked against `ref` as check_like does.
void check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                const ProcessGroup& pg, const char* ref_name, const Tensor& ref, bool same_shape) {
  TDIST_CHECK(list.size() == static_cast<size_t>(pg.size()), InvalidArgument, op, ": ", what,
              " holds ", list.size(), " tensors; it needs one per rank of the group (", pg.size(),
              ")");
  for (size_t i = 0; i < list.size(); ++i) {
    check_like(op, str_cat(what, "[", i, "]"), list[i], ref_name, ref, same_shape);
  }
}

void check_rank(const char* op, const char* what, int r, const ProcessGroup& pg) {
  TDIST_CHECK(r >= 0 && r < pg.size(), InvalidArgument, op, ": ", what, " ", r,
              " is not a rank of the group (0..", pg.size() - 1, ")");
}

void check_empty_off_root(const char* op, const char* what, const std::vector<Tensor>& list,
                          const char* root_name, int root, const ProcessGroup& pg) {
  TDIST_CHECK(list.empty(), InvalidArgument, op, ": ", what, " must be empty on ranks other than ",
              root_name, " (", root, "); rank ", pg.rank(), " was given ", list.size(), " tensors");
}

size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// ---- staging --------------------------------------------------------------------------

// Whether the elements in memory are not the tensor's values in row-major order.
bool needs_staging(const Tensor& t) { return !t.is_contiguous() || t.is_neg(); }

// True when, by its strides, no two elements of `t` can share memory: sorted by stride,
// each dimension steps past everything the smaller ones span. (Rare interleavings that
// do not overlap either fail this test and are refused.)
bool provably_non_overlapping(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dimensions with size > 1
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return true;
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;  // the largest offset the dimensions so far reach
  for (const auto& [stride, size] : dims) {
    if (stride <= span) return false;
    span += stride * (size - 1);
  }
  return true;
}

Tensor empty_dense(c10::IntArrayRef sizes, c10::ScalarType type) {
  return ::torch::empty(sizes, ::torch::TensorOptions().dtype(type));
}

Tensor dense_copy(const Tensor& t) {
  ::torch::NoGradGuard no_grad;
  Tensor out = empty_dense(t.sizes(), t.scalar_type());
  out.copy_(t);
  return out;
}

// The bytes [first, last) that `t`'s elements occupy (empty for no elements).
std::pair<const std::byte*, const std::byte*> byte_range(const Tensor& t) {
  const auto* first = static_cast<const std::byte*>(t.data_ptr());
  if (t.numel() == 0) return {first, first};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {first, first + (last + 1) * static_cast<int64_t>(t.element_size())};
}

bool overlaps(const Tensor& t, const void* buffer, size_t bytes) {
  const auto [first, last] = byte_range(t);
  const auto* begin = static_cast<const std::byte*>(buffer);
  return bytes > 0 && first < last && first < begin + bytes && begin < last;
}

// A buffer holding `t`'s values the operation may read.
const void* stage_input(Staging& s, const Tensor& t) {
  Tensor dense = needs_staging(t) ? dense_copy(t) : t;
  s.keep.push_back(dense);
  return dense.data_ptr();
}

// As stage_input, copying `t` when it shares memory with [out, out + out_bytes), which
// the operation writes.
const void* stage_input_apart(Staging& s, const Tensor& t, const void* out, size_t out_bytes) {
  if (!overlaps(t, out, out_bytes)) return stage_input(s, t);
  Tensor copy = dense_copy(t);
  s.keep.push_back(copy);
  return copy.data_ptr();
}

void check_writable(const char* op, const std::string& what, const Tensor& t) {
  TDIST_CHECK(provably_non_overlapping(t), InvalidArgument, op, ": ", what, " (shape ", t.sizes(),
              ", strides ", t.strides(),
              ") may have elements that share memory (as expand() makes), so results cannot be "
              "written into it; pass a tensor with storage of its own, e.g. .contiguous()");
}

// A buffer the operation may write `t`'s result into (starting with t's values when
// `keep_values`); copied into `t` on success when it is not `t` itself.
void* stage_output(Staging& s, const char* op, const char* what, const Tensor& t,
                   bool keep_values) {
  if (!needs_staging(t)) {
    s.keep.push_back(t);
    return t.data_ptr();
  }
  check_writable(op, what, t);
  Tensor tmp = keep_values ? dense_copy(t) : empty_dense(t.sizes(), t.scalar_type());
  s.keep.push_back(tmp);
  s.copy_back.emplace_back(t, tmp);
  return tmp.data_ptr();
}

int64_t total_numel(const std::vector<Tensor>& list) {
  return std::accumulate(list.begin(), list.end(), int64_t{0},
                         [](int64_t sum, const Tensor& t) { return sum + t.numel(); });
}

// One buffer for a list of outputs, back to back; block i is copied into outputs[i].
void* stage_outputs(Staging& s, const char* op, const char* what,
                    const std::vector<Tensor>& outputs, c10::ScalarType type) {
  Tensor flat = empty_dense({total_numel(outputs)}, type);
  s.keep.push_back(flat);
  int64_t offset = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    check_writable(op, str_cat(what, "[", i, "]"), out);
    s.copy_back.emplace_back(out, flat.narrow(0, offset, out.numel()).view(out.sizes()));
    offset += out.numel();
  }
  return flat.data_ptr();
}

// One buffer holding a list of inputs' values back to back.
const void* stage_inputs(Staging& s, const std::vector<Tensor>& inputs, c10::ScalarType type) {
  ::torch::NoGradGuard no_grad;
  Tensor flat = empty_dense({total_numel(inputs)}, type);
  int64_t offset = 0;
  for (const Tensor& in : inputs) {
    flat.narrow(0, offset, in.numel()).view(in.sizes()).copy_(in);
    offset += in.numel();
  }
  s.keep.push_back(flat);
  return flat.data_ptr();
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
                 " tensors are not supported yet (tensor on ", device.str(),
                 "); move it to the CPU");
}

std::shared_ptr<ProcessGroup> Group::resolve(const char* op) const {
  if (!given_) return get_default_group();
  TDIST_CHECK(group_ != nullptr, InvalidArgument, op,
              ": the group is null; new_group() and split() return null on ranks that are not "
              "members, and those ranks must not call the group's collectives");
  return group_;
}

// ---- collectives ----------------------------------------------------------------------

WorkPtr all_reduce_async(const Tensor& tensor, ReduceOp op, Group group) {
  constexpr const char* kOp = "all_reduce";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s;
  void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/true);
  return launch(kOp, pg->all_reduce(data, data, count_of(tensor), dtype, op), std::move(s));
}

WorkPtr broadcast_async(const Tensor& tensor, int src, Group group) {
  constexpr const char* kOp = "broadcast";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  check_rank(kOp, "src", src, *pg);
  Staging s;
  // The source only reads its tensor.
  void* data = pg->rank() == src ? const_cast<void*>(stage_input(s, tensor))
                                 : stage_output(s, kOp, "tensor", tensor, /*keep_values=*/false);
  return launch(kOp, pg->broadcast(data, count_of(tensor), dtype, src), std::move(s));
}

WorkPtr reduce_async(const Tensor& tensor, int dst, ReduceOp op, Group group) {
  constexpr const char* kOp = "reduce";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  check_rank(kOp, "dst", dst, *pg);
  Staging s;
  if (pg->rank() == dst) {
    void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/true);
    return launch(kOp, pg->reduce(data, data, count_of(tensor), dtype, op, dst), std::move(s));
  }
  const void* send = stage_input(s, tensor);
  return launch(kOp, pg->reduce(send, nullptr, count_of(tensor), dtype, op, dst), std::move(s));
}

WorkPtr all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input, Group group) {
  constexpr const char* kOp = "all_gather";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "input", input);
  check_list(kOp, "outputs", outputs, *pg, "input", input, /*same_shape=*/true);
  Staging s;
  const void* send = stage_input(s, input);
  void* recv = stage_outputs(s, kOp, "outputs", outputs, input.scalar_type());
  return launch(kOp, pg->all_gather(send, recv, count_of(input), dtype), std::move(s));
}

WorkPtr all_gather_into_tensor_async(const Tensor& output, const Tensor& input, Group group) {
  constexpr const char* kOp = "all_gather_into_tensor";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "input", input);
  check_like(kOp, "output", output, "input", input, /*same_shape=*/false);
  const size_t count = count_of(input);
  TDIST_CHECK(count_of(output) == count * static_cast<size_t>(pg->size()), InvalidArgument, kOp,
              ": output has ", output.numel(), " elements; it needs ", pg->size(), " x ", count,
              " (the group's size times input's)");
  Staging s;
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const size_t block = count * input.element_size();
  const void* own = static_cast<std::byte*>(recv) + static_cast<size_t>(pg->rank()) * block;
  const bool in_place = !needs_staging(input) && input.data_ptr() == own;
  const void* send = in_place ? own : stage_input_apart(s, input, recv, block * pg->size());
  return launch(kOp, pg->all_gather(send, recv, count, dtype), std::move(s));
}

WorkPtr gather_async(const Tensor& input, const std::vector<Tensor>& gather_list, int dst,
                     Group group) {
  constexpr const char* kOp = "gather";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "input", input);
  check_rank(kOp, "dst", dst, *pg);
  Staging s;
  void* recv = nullptr;
  if (pg->rank() == dst) {
    check_list(kOp, "gather_list", gather_list, *pg, "input", input, /*same_shape=*/true);
    recv = stage_outputs(s, kOp, "gather_list", gather_list, input.scalar_type());
  } else {
    check_empty_off_root(kOp, "gather_list", gather_list, "dst", dst, *pg);
  }
  const void* send = stage_input(s, input);
  return launch(kOp, pg->gather(send, recv, count_of(input), dtype, dst), std::move(s));
}

WorkPtr scatter_async(const Tensor& output, const std::vector<Tensor>& scatter_list, int src,
                      Group group) {
  constexpr const char* kOp = "scatter";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "output", output);
  check_rank(kOp, "src", src, *pg);
  Staging s;
  const void* send = nullptr;
  if (pg->rank() == src) {
    check_list(kOp, "scatter_list", scatter_list, *pg, "output", output, /*same_shape=*/true);
    send = stage_inputs(s, scatter_list, output.scalar_type());
  } else {
    check_empty_off_root(kOp, "scatter_list", scatter_list, "src", src, *pg);
  }
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  return launch(kOp, pg->scatter(send, recv, count_of(output), dtype, src), std::move(s));
}

WorkPtr reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                             Group group) {
  constexpr const char* kOp = "reduce_scatter";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "output", output);
  check_list(kOp, "inputs", inputs, *pg, "output", output, /*same_shape=*/true);
  Staging s;
  const void* send = stage_inputs(s, inputs, output.scalar_type());
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  return launch(kOp, pg->reduce_scatter(send, recv, count_of(output), dtype, op), std::move(s));
}

WorkPtr reduce_scatter_tensor_async(const Tensor& output, const Tensor& input, ReduceOp op,
                                    Group group) {
  constexpr const char* kOp = "reduce_scatter_tensor";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "output", output);
  check_like(kOp, "input", input, "output", output, /*same_shape=*/false);
  const size_t count = count_of(output);
  TDIST_CHECK(count_of(input) == count * static_cast<size_t>(pg->size()), InvalidArgument, kOp,
              ": input has ", input.numel(), " elements; it needs ", pg->size(), " x ", count,
              " (the group's size times output's)");
  Staging s;
  const size_t block = count * output.element_size();
  const bool in_place = !needs_staging(input) && !needs_staging(output) &&
                        output.data_ptr() == static_cast<std::byte*>(input.data_ptr()) +
                                                 static_cast<size_t>(pg->rank()) * block;
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const void* send = in_place ? stage_input(s, input) : stage_input_apart(s, input, recv, block);
  return launch(kOp, pg->reduce_scatter(send, recv, count, dtype, op), std::move(s));
}

WorkPtr all_to_all_async(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         Group group) {
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
  Staging s;
  const void* send = stage_inputs(s, inputs, inputs[0].scalar_type());
  void* recv = stage_outputs(s, kOp, "outputs", outputs, inputs[0].scalar_type());
  // Always the variable-size form: ranks whose own counts happen to be even must still
  // issue the same operation as the others.
  return launch(kOp, pg->all_to_allv(send, send_counts, recv, recv_counts, dtype), std::move(s));
}

WorkPtr all_to_all_single_async(const Tensor& output, const Tensor& input,
                                const std::vector<int64_t>& output_split_sizes,
                                const std::vector<int64_t>& input_split_sizes, Group group) {
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
  Staging s;
  void* recv = stage_output(s, kOp, "output", output, /*keep_values=*/false);
  const void* send = stage_input_apart(s, input, recv, count_of(output) * output.element_size());
  return launch(kOp, pg->all_to_allv(send, send_counts, recv, recv_counts, dtype), std::move(s));
}

WorkPtr isend(const Tensor& tensor, int dst, Group group, uint32_t tag) {
  constexpr const char* kOp = "isend";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s;
  const void* data = stage_input(s, tensor);
  return launch(kOp, pg->isend(data, count_of(tensor), dtype, dst, tag), std::move(s));
}

WorkPtr irecv(const Tensor& tensor, int src, Group group, uint32_t tag) {
  constexpr const char* kOp = "irecv";
  auto pg = group.resolve(kOp);
  const DType dtype = check_tensor(kOp, "tensor", tensor);
  Staging s;
  void* data = stage_output(s, kOp, "tensor", tensor, /*keep_values=*/false);
  return launch(kOp, pg->irecv(data, count_of(tensor), dtype, src, tag), std::move(s));
}

WorkPtr barrier_async(Group group) {
  return launch("barrier", group.resolve("barrier")->barrier(), Staging{});
}

// ---- blocking forms -------------------------------------------------------------------

void all_reduce(const Tensor& tensor, ReduceOp op, Group group) {
  all_reduce_async(tensor, op, std::move(group))->wait();
}
void broadcast(const Tensor& tensor, int src, Group group) {
  broadcast_async(tensor, src, std::move(group))->wait();
}
void reduce(const Tensor& tensor, int dst, ReduceOp op, Group group) {
  reduce_async(tensor, dst, op, std::move(group))->wait();
}
void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, Group group) {
  all_gather_async(outputs, input, std::move(group))->wait();
}
void all_gather_into_tensor(const Tensor& output, const Tensor& input, Group group) {
  all_gather_into_tensor_async(output, input, std::move(group))->wait();
}
void gather(const Tensor& input, const std::vector<Tensor>& gather_list, int dst, Group group) {
  gather_async(input, gather_list, dst, std::move(group))->wait();
}
void scatter(const Tensor& output, const std::vector<Tensor>& scatter_list, int src, Group group) {
  scatter_async(output, scatter_list, src, std::move(group))->wait();
}
void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                    Group group) {
  reduce_scatter_async(output, inputs, op, std::move(group))->wait();
}
void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, Group group) {
  reduce_scatter_tensor_async(output, input, op, std::move(group))->wait();
}
void all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                Group group) {
  all_to_all_async(outputs, inputs, std::move(group))->wait();
}
void all_to_all_single(const Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes, Group group) {
  all_to_all_single_async(output, input, output_split_sizes, input_split_sizes, std::move(group))
      ->wait();
}
void send(const Tensor& tensor, int dst, Group group, uint32_t tag) {
  isend(tensor, dst, std::move(group), tag)->wait();
}
void recv(const Tensor& tensor, int src, Group group, uint32_t tag) {
  irecv(tensor, src, std::move(group), tag)->wait();
}
void barrier(Group group) { barrier_async(std::move(group))->wait(); }

}  // namespace tdist::torch
