// Staging and the tensor operations' Work (tensor_work.h): dense buffers for the process
// group's raw-pointer calls, the copy into the caller's tensors on completion, and the
// buffers of dropped Works kept until their operations end.
#include "tensor_work.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cuda_work.h"
#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"
#include "tdist/torch/collectives.h"

namespace tdist::torch {
namespace {

using tdist::detail::str_cat;
using ::torch::Tensor;

// Unfinished operations whose Work was dropped, holding their buffers until they
// complete; pruned whenever an operation starts. Never destroyed, so that an operation
// still running while the process exits does not write into freed memory.
class Orphans {
 public:
  static Orphans& get() {
    static auto* orphans = new Orphans;
    return *orphans;
  }

  void adopt(std::function<bool()> finished, std::vector<Tensor> keep) TDIST_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    pending_.emplace_back(std::move(finished), std::move(keep));
    count_.store(pending_.size(), std::memory_order_relaxed);
  }

  // Without a lock while there are none (every launch() calls it).
  void prune() TDIST_EXCLUDES(mu_) {
    if (count_.load(std::memory_order_relaxed) == 0) return;
    MutexLock lock(mu_);
    std::erase_if(pending_, [](const auto& p) { return p.first(); });
    count_.store(pending_.size(), std::memory_order_relaxed);
  }

 private:
  Mutex mu_;
  std::atomic<size_t> count_{0};  // pending_.size(), read without mu_
  std::vector<std::pair<std::function<bool()>, std::vector<Tensor>>> pending_ TDIST_GUARDED_BY(mu_);
};

// The results of a finished operation into the caller's tensors. Writes outside autograd
// (as the operation's own writes through data pointers are); an inference tensor only
// accepts writes inside InferenceMode. InferenceMode(false) turns grad mode on, so
// NoGradGuard comes after it.
void copy_back(Staging& s) {
  for (auto& [dst, src] : s.copy_back) {
    c10::InferenceMode inference(dst.is_inference());
    ::torch::NoGradGuard no_grad;
    dst.copy_(src);
  }
}

// Whether the thread's next tensor call is waited for at once (CallerWaits).
thread_local bool caller_waits = false;

// Wraps the process group's Work: completes when it does, after the copy-back.
class TensorWork final : public Work {
 public:
  TensorWork(const char* op, WorkPtr inner, Staging staging)
      : Work(op), inner_(std::move(inner)), staging_(std::move(staging)) {}

  // Finishes this Work now that the inner one has (called from its callback).
  void complete_now() { poll(Deadline::at(Clock::now())); }

  ~TensorWork() override {
    if (!inner_->is_completed()) {
      Orphans::get().adopt([inner = std::move(inner_)] { return inner->is_completed(); },
                           std::move(staging_.keep));
    }
  }

 protected:
  void poll(Deadline deadline) override {
    if (!inner_done(deadline)) return;
    std::exception_ptr error;
    {
      MutexLock lock(mu_);
      if (finished_) return;
      error = inner_->exception();
      if (error == nullptr) {
        try {
          copy_back_locked();
        } catch (...) {
          error = std::current_exception();
        }
      }
      staging_ = {};  // the temporaries are not needed any more
      finished_ = true;
    }
    set_source_rank(inner_->source_rank());  // a receive's sender
    finish(error);                           // outside mu_: callbacks may poll this Work
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

  void copy_back_locked() TDIST_REQUIRES(mu_) { copy_back(staging_); }

  WorkPtr inner_;
  Mutex mu_;
  bool finished_ TDIST_GUARDED_BY(mu_) = false;
  // Guarded once the Work is shared (the constructor and destructor have it alone).
  Staging staging_ TDIST_GUARDED_BY(mu_);
};

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

// A dense buffer for the operation: on the CPU, on the tensors' device (kDevice), or in
// pinned host memory (kStaged, filled and read on the call's side stream).
Tensor empty_dense(const Staging& s, c10::IntArrayRef sizes, c10::ScalarType type) {
  auto options = ::torch::TensorOptions().dtype(type);
  if (s.mode == StageMode::kDevice) options = options.device(s.device);
  if (s.mode == StageMode::kStaged) options = options.pinned_memory(true);
  return ::torch::empty(sizes, options);
}

Tensor dense_copy(const Staging& s, const Tensor& t) {
  ::torch::NoGradGuard no_grad;
  Tensor out = empty_dense(s, t.sizes(), t.scalar_type());
  out.copy_(t, /*non_blocking=*/s.mode == StageMode::kStaged);
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

void check_writable(const char* op, const std::string& what, const Tensor& t) {
  TDIST_CHECK(provably_non_overlapping(t), InvalidArgument, op, ": ", what, " (shape ", t.sizes(),
              ", strides ", t.strides(),
              ") may have elements that share memory (as expand() makes), so results cannot be "
              "written into it; pass a tensor with storage of its own, e.g. .contiguous()");
}

int64_t total_numel(const std::vector<Tensor>& list) {
  return std::accumulate(list.begin(), list.end(), int64_t{0},
                         [](int64_t sum, const Tensor& t) { return sum + t.numel(); });
}

}  // namespace

bool needs_staging(const Staging& s, const Tensor& t) {
  return s.mode == StageMode::kStaged || !t.is_contiguous() || t.is_neg();
}

const void* stage_input(Staging& s, const Tensor& t) {
  Tensor dense = needs_staging(s, t) ? dense_copy(s, t) : t;
  s.keep.push_back(dense);
  return dense.data_ptr();
}

const void* stage_input_apart(Staging& s, const Tensor& t, const void* out, size_t out_bytes) {
  if (!overlaps(t, out, out_bytes)) return stage_input(s, t);
  Tensor copy = dense_copy(s, t);
  s.keep.push_back(copy);
  return copy.data_ptr();
}

void* stage_output(Staging& s, const char* op, const char* what, const Tensor& t,
                   bool keep_values) {
  if (!needs_staging(s, t)) {
    s.keep.push_back(t);
    return t.data_ptr();
  }
  check_writable(op, what, t);
  Tensor tmp = keep_values ? dense_copy(s, t) : empty_dense(s, t.sizes(), t.scalar_type());
  s.keep.push_back(tmp);
  s.copy_back.emplace_back(t, tmp);
  return tmp.data_ptr();
}

void* stage_outputs(Staging& s, const char* op, const char* what,
                    const std::vector<Tensor>& outputs, c10::ScalarType type) {
  Tensor flat = empty_dense(s, {total_numel(outputs)}, type);
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

const void* stage_inputs(Staging& s, const std::vector<Tensor>& inputs, c10::ScalarType type) {
  ::torch::NoGradGuard no_grad;
  Tensor flat = empty_dense(s, {total_numel(inputs)}, type);
  int64_t offset = 0;
  for (const Tensor& in : inputs) {
    flat.narrow(0, offset, in.numel())
        .view(in.sizes())
        .copy_(in, /*non_blocking=*/s.mode == StageMode::kStaged);
    offset += in.numel();
  }
  s.keep.push_back(flat);
  return flat.data_ptr();
}

Staging open_staging(const char* op, const ProcessGroup& group,
                     const std::vector<const Tensor*>& tensors) {
  Staging s;
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) {
      first = t;
      continue;
    }
    TDIST_CHECK(t->device() == first->device(), InvalidArgument, op,
                ": all tensors of one call must be on one device, but this call has tensors on ",
                first->device(), " and on ", t->device());
  }
  if (first == nullptr) return s;
  s.device = first->device();
  if (s.device.is_cpu()) {
    TDIST_CHECK((group.memory_kinds() & memory_bit(MemoryKind::kHost)) != 0, InvalidArgument, op,
                ": the ", group.backend_name(),
                " group takes CUDA tensors only, but this call's tensors are on the CPU");
    return s;
  }
#if TDIST_TORCH_CUDA
  if (s.device.is_cuda()) {
    open_cuda(s, group);
    return s;
  }
#endif
  TDIST_THROW(InvalidArgument, detail::device_error(s.device), " (", op, ")");
}

CallerWaits::CallerWaits() : outer_(std::exchange(caller_waits, true)) {}
CallerWaits::~CallerWaits() { caller_waits = outer_; }

void adopt_orphan(std::function<bool()> finished, std::vector<Tensor> keep) {
  Orphans::get().adopt(std::move(finished), std::move(keep));
}

WorkPtr launch(const char* op, Staging staging, const std::function<WorkPtr()>& issue) {
  Orphans::get().prune();
#if TDIST_TORCH_CUDA
  if (staging.mode != StageMode::kHost) return launch_cuda(op, std::move(staging), issue);
#endif
  // Calls made by callbacks that run while this one is issued or waited for are not the
  // caller's: asynchronous.
  struct Restore {
    bool waits;
    ~Restore() { caller_waits = waits; }
  } restore{std::exchange(caller_waits, false)};
  WorkPtr inner;
  {
    // The group may run the operation inside the call (process_group.h).
    const WaitsAtOnce at_once(restore.waits);
    inner = issue();
  }
  if (restore.waits) {
    // The caller waits at once (CallerWaits): finish here, and no Work around the group's.
    // The Staging (the buffers) lives until then; a failure is thrown from here.
    try {
      inner->wait();
    } catch (...) {
      // An operation that failed by the group's timeout may still run: keep its buffers.
      if (!inner->is_completed()) {
        adopt_orphan([inner] { return inner->is_completed(); }, std::move(staging.keep));
      }
      throw;
    }
    copy_back(staging);
    return inner;
  }
  auto work = std::make_shared<TensorWork>(op, inner, std::move(staging));
  // Complete (copy back) as soon as the group's Work does, so callbacks and futures on
  // this Work fire without a waiter; a dropped Work is left to the orphans.
  inner->add_callback([weak = std::weak_ptr<TensorWork>(work)] {
    if (auto self = weak.lock()) self->complete_now();
  });
  return work;
}

}  // namespace tdist::torch
