#include "reducer.h"

#include <ATen/Parallel.h>

// Internal LibTorch headers, unavoidable: the public C++ API has no hook that runs after a
// parameter's gradient was accumulated (impl::grad_accumulator + Node::add_post_hook,
// through compat.h, which also hides how the versions hold a node) and no way to run code
// when a backward pass ends (Engine::queue_callback, torch/csrc/autograd/engine.h, the
// same in 1.13 and 2.x). PyTorch's own Reducer uses the same three.
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "core/polling.h"
#include "diag/trace.h"
#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

// CommOverlap::kAuto: overlap only where a core is free for the communication.
bool launch_during_backward(CommOverlap overlap) {
  if (overlap != CommOverlap::kAuto) return overlap == CommOverlap::kDuringBackward;
  const int local_ranks = std::max(1, core::launcher_local_ranks());
  const int threads = std::max(1, at::get_num_threads());
  return core::usable_cores() >= local_ranks * (threads + 1);
}

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

// Runs after AccumulateGrad stored a parameter's gradient (a post hook on its node).
class Reducer::GradHook final : public ::torch::autograd::FunctionPostHook {
 public:
  GradHook(Reducer& reducer, size_t index) : reducer_(reducer), index_(index) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    reducer_.autograd_hook(index_);
    return outputs;
  }

 private:
  Reducer& reducer_;
  const size_t index_;
};

Reducer::Reducer(std::vector<NamedTensor> params, std::shared_ptr<ProcessGroup> group,
                 const DDPOptions& options)
    : group_(std::move(group)),
      options_(options),
      device_(params.empty() ? c10::Device(c10::kCPU) : params.front().tensor.device()),
      comm_stream_(device_),
      control_on_device_((group_->memory_kinds() & memory_bit(MemoryKind::kHost)) == 0),
      handle_unused_(options.find_unused_parameters || options.static_graph),
      during_backward_(launch_during_backward(options.overlap)),
      hook_(allreduce_hook()) {
  params_.reserve(params.size());
  for (NamedTensor& p : params) {
    Param param;
    param.name = std::move(p.name);
    param.tensor = std::move(p.tensor);
    // The parameter only holds its accumulator weakly: keep it, and with it the hook.
    param.grad_accumulator = ::torch::autograd::impl::grad_accumulator(param.tensor);
    params_.push_back(std::move(param));
  }
  ready_.assign(params_.size(), 0);
  if (diag::trace_enabled()) {
    trace_rank_ = group_->global_rank(group_->rank());
    trace_track_ = diag::trace_track(trace_rank_, "DDP buckets");
  }
  std::vector<size_t> reversed(params_.size());
  for (size_t i = 0; i < reversed.size(); ++i) reversed[i] = reversed.size() - 1 - i;
  build_buckets_locked(reversed);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook_key =
        params_[i].grad_accumulator->add_post_hook(std::make_unique<GradHook>(*this, i));
  }
}

Reducer::~Reducer() {
  MutexLock lock(mu_);
  if (phase_ == Phase::kReducing) {
    // Launched collectives write into the buckets: they must end before the buckets go.
    if (std::exception_ptr error = wait_for_launched_locked()) {
      TDIST_LOG(kWarn) << "DDP: an unfinished backward pass failed: " << message_of(error);
    }
  }
  for (Param& p : params_) p.grad_accumulator->del_post_hook(p.hook_key);
}

void Reducer::prepare_for_forward() {
  MutexLock lock(mu_);
  if (phase_ == Phase::kReducing) {
    std::exception_ptr error = wait_for_launched_locked();
    detach_in_place_locked();
    phase_ = Phase::kIdle;
    TDIST_THROW(Error, "DDP: synchronized backward pass ", synced_passes_,
                " did not finish: it failed before every gradient was reduced, so this rank's "
                "gradients are not averaged",
                error != nullptr ? " (communication: " + message_of(error) + ")" : "",
                ". The next forward starts a new iteration");
  }
  if (rebuild_due_) rebuild_buckets_locked();
}

void Reducer::prepare_for_backward(const std::vector<::torch::Tensor>& outputs, int average_over) {
  MutexLock lock(mu_);
  average_over_ = average_over;
  if (handle_unused_ && !(options_.static_graph && unused_known_)) {
    TDIST_CHECK(!outputs.empty(), InvalidArgument,
                "DDP: find_unused_parameters and static_graph need the tensors of forward's "
                "output, and DDP found none in it (it looks into Tensor, std::vector, "
                "std::tuple and std::pair)");
    unused_ = search_unused_locked(outputs);
    unused_known_ = true;
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  next_bucket_ = 0;
  control_work_.reset();
  phase_ = Phase::kArmed;
}

void Reducer::prepare_for_local_backward() {
  MutexLock lock(mu_);
  phase_ = Phase::kArmedLocal;
}

bool Reducer::needs_outputs() const {
  MutexLock lock(mu_);
  return handle_unused_ && !(options_.static_graph && unused_known_);
}

void Reducer::set_comm_hook(std::shared_ptr<CommHook> hook) {
  MutexLock lock(mu_);
  TDIST_CHECK(hook != nullptr, InvalidArgument, "DDP: register_comm_hook got a null hook");
  TDIST_CHECK(!custom_hook_, Error,
              "DDP: a comm hook is already registered (register_comm_hook may be called once)");
  TDIST_CHECK(synced_passes_ == 0 && phase_ != Phase::kReducing, Error,
              "DDP: register_comm_hook must be called before the first synchronized backward");
  hook_ = std::move(hook);
  custom_hook_ = true;
}

void Reducer::autograd_hook(size_t index) {
  MutexLock lock(mu_);
  switch (phase_) {
    case Phase::kIdle:  // a backward pass that no DDP forward armed: local only
      return;
    case Phase::kArmedLocal:  // under no_sync: only count the pass
      ++backward_passes_;
      phase_ = Phase::kIdle;
      return;
    case Phase::kArmed:
      start_reduction_locked();
      break;
    case Phase::kReducing:
      break;
  }
  mark_ready_locked(index);
}

void Reducer::start_reduction_locked() {
  phase_ = Phase::kReducing;
  ++backward_passes_;
  ++synced_passes_;
  ::torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
  const auto passes = static_cast<int64_t>(backward_passes_);
  control_.assign(2 + (handle_unused_ ? params_.size() : 0), 1);
  control_[0] = passes;
  control_[1] = -passes;
  for (size_t u : unused_) control_[2 + u] = params_[u].tensor.grad().defined() ? 1 : 0;
  if (during_backward_) launch_control_locked();
  for (size_t u : unused_) mark_ready_locked(u);
}

void Reducer::launch_control_locked() {
  // Issued before any bucket, so it pairs with the same collective on every rank.
  if (control_on_device_) {
    control_tensor_ =
        ::torch::tensor(control_, ::torch::TensorOptions().dtype(::torch::kLong)).to(device_);
    control_work_ = all_reduce_async(control_tensor_, ReduceOpKind::kMax, group_);
    return;
  }
  control_work_ =
      group_->all_reduce(control_.data(), control_.size(), DType::kI64, ReduceOpKind::kMax);
}

void Reducer::launch_full_buckets_locked() {
  // In index order only, so that every rank issues the same sequence.
  // Read here: the lambda runs inside comm_stream_.run(), where the analysis cannot see mu_.
  CommHook& hook = *hook_;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& next = buckets_[next_bucket_++];
    next.work = comm_stream_.run([&] { return hook.run(*group_, next.grad); });
    TDIST_CHECK(next.work != nullptr, Error, "DDP: the comm hook returned no Work for bucket ",
                next.grad.index);
    if (trace_rank_ >= 0) trace_launched_locked(next);
  }
}

namespace {

diag::TraceArgs bucket_args(size_t index, size_t bytes, size_t params) {
  diag::TraceArgs args;
  args.add_uint("bucket", index).add_uint("bytes", bytes).add_uint("params", params);
  return args;
}

}  // namespace

void Reducer::trace_ready_locked(const Bucket& bucket) const {
  diag::trace_instant(trace_rank_, trace_track_,
                      "bucket " + std::to_string(bucket.grad.index) + " ready", "ddp",
                      diag::trace_now_ns(),
                      bucket_args(bucket.grad.index, bucket.bytes, bucket.params.size())
                          .add_uint("pass", synced_passes_));
}

void Reducer::trace_launched_locked(Bucket& bucket) const {
  // One complete event from the launch to the end of the bucket's Work (the callback runs
  // on whichever thread finishes it, or here when it already has).
  const int64_t launched = diag::trace_now_ns();
  bucket.work->add_callback(
      [rank = trace_rank_, track = trace_track_, launched,
       args = bucket_args(bucket.grad.index, bucket.bytes, bucket.params.size())
                  .add_uint("pass", synced_passes_),
       name = "bucket " + std::to_string(bucket.grad.index)]() {
        diag::trace_complete(rank, track, name, "ddp", launched, diag::trace_now_ns(), args);
      });
}

void Reducer::mark_ready_locked(size_t index) {
  Param& param = params_[index];
  TDIST_CHECK(!ready_[index], Error, "DDP: parameter '", param.name,
              "' got its gradient twice in synchronized backward pass ", synced_passes_,
              ": a second backward pass started before the first finished (a reentrant or "
              "concurrent backward, or the parameter was used outside forward). Run forward "
              "before each backward; accumulate gradients under no_sync()");
  ready_[index] = 1;
  if (synced_passes_ == 1 && !rebuilt_) ready_order_.push_back(index);
  Bucket& bucket = buckets_[param.bucket];
  copy_grad_to_bucket_locked(param, bucket);
  if (--bucket.pending == 0) {
    if (trace_rank_ >= 0) trace_ready_locked(bucket);
    if (during_backward_) launch_full_buckets_locked();
  }
}

void Reducer::copy_grad_to_bucket_locked(const Param& param, Bucket& bucket) {
  ::torch::Tensor& grad = param.tensor.mutable_grad();
  TDIST_CHECK(!grad.defined() || (grad.layout() == ::torch::kStrided && grad.device() == device_),
              InvalidArgument, "DDP: parameter '", param.name, "' got a sparse gradient or one on ",
              grad.device(), "; DDP reduces dense gradients on the parameters' device (", device_,
              ")");
  if (bucket.in_place) {
    attach_in_place_locked(param, bucket);
    return;
  }
  ::torch::Tensor& view = bucket.grad.gradients[param.slot];
  if (!grad.defined()) {
    view.zero_();
    return;
  }
  if (grad.data_ptr() == view.data_ptr()) return;  // already its slice of the bucket
  view.copy_(grad);
  if (options_.gradient_as_bucket_view) grad = view;
}

void Reducer::attach_in_place_locked(const Param& param, Bucket& bucket) {
  GradBucket& g = bucket.grad;
  const ::torch::Tensor& grad = param.tensor.grad();
  if (grad.defined() && grad.is_contiguous()) {
    g.gradients[0] = grad;
    g.buffer = grad.view({-1});
    return;
  }
  if (!bucket.staging.defined()) {
    bucket.staging = ::torch::empty({param.tensor.numel()}, param.tensor.options());
  }
  g.buffer = bucket.staging;
  g.gradients[0] = bucket.staging.view(param.tensor.sizes());
  if (grad.defined()) {
    g.gradients[0].copy_(grad);
  } else {
    g.buffer.zero_();
  }
}

void Reducer::detach_in_place_locked() {
  for (Bucket& b : buckets_) {
    if (!b.in_place) continue;
    b.grad.buffer = ::torch::Tensor();
    b.grad.gradients[0] = ::torch::Tensor();
  }
}

void Reducer::finalize_backward() {
  MutexLock lock(mu_);
  if (phase_ != Phase::kReducing) return;
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) missing.push_back(i);
  }
  if (!during_backward_) {
    // A hook that throws fails this backward; the next forward waits for what it launched.
    launch_control_locked();
    launch_full_buckets_locked();
  }
  std::exception_ptr error = wait_for_launched_locked();
  comm_stream_.join();  // what follows on the current stream sees the reduced buckets
  phase_ = Phase::kIdle;
  // Written out only for an error (formatting costs microseconds, every backward pass).
  auto pass = [this]() TDIST_REQUIRES(mu_) {
    return ::tdist::detail::str_cat("DDP synchronized backward pass ", synced_passes_, " (rank ",
                                    group_->rank(), "): ");
  };
  if (error != nullptr) {
    rethrow_with_context(error, pass() +
                                    "reducing gradients failed; most likely the ranks ran "
                                    "different numbers of backward passes (the other ranks "
                                    "never joined this one), or a rank failed: ");
  }
  if (!missing.empty() && handle_unused_) {
    TDIST_THROW(Error, pass(), "these parameters were reached from forward's output but got no ",
                "gradient: ", describe_locked(missing),
                ". Every output of forward must take part in computing the loss");
  }
  TDIST_CHECK(missing.empty(), Error, pass(),
              "backward finished, but these parameters got no gradient: ", describe_locked(missing),
              ". Parameters that do not take part in computing the loss need "
              "DDPOptions::find_unused_parameters = true (or static_graph, when the same ones "
              "go unused in every iteration)");
  if (control_on_device_) {
    const ::torch::Tensor host = control_tensor_.cpu();  // after wait(): the reduced vector
    std::copy_n(host.data_ptr<int64_t>(), control_.size(), control_.begin());
  }
  const int64_t highest = control_[0];
  const int64_t lowest = -control_[1];
  TDIST_CHECK(highest == lowest, DesyncError, pass(),
              "ranks ran different numbers of backward passes through this DDP (passes under "
              "no_sync included): this rank ran ",
              backward_passes_, ", all ranks between ", lowest, " and ", highest,
              ". Every rank must run the same forward/backward passes (the same number of "
              "batches and accumulation steps)");
  if (options_.commit_vote && group_->size() > 1) {
    int32_t vote = 1;  // this rank holds every bucket reduced
    try {
      if (control_on_device_) {  // a group of device memory only (nccl)
        ::torch::Tensor t =
            ::torch::ones({1}, ::torch::TensorOptions().dtype(::torch::kInt).device(device_));
        all_reduce_async(t, ReduceOpKind::kMin, group_)->wait();
      } else {
        WaitsAtOnce at_once;
        group_->all_reduce(&vote, 1, DType::kI32, ReduceOpKind::kMin)->wait();
      }
    } catch (...) {
      rethrow_with_context(std::current_exception(),
                           pass() + "the commit vote failed, so this step is not committed: ");
    }
  }
  for (Bucket& b : buckets_) hook_->finish(*group_, b.grad);
  rescale_average_locked();
  write_gradients_locked();
  detach_in_place_locked();
  if (synced_passes_ == 1 && !rebuilt_ &&
      (!options_.find_unused_parameters || options_.static_graph)) {
    rebuild_due_ = true;
  }
}

std::exception_ptr Reducer::wait_for_launched_locked() {
  std::exception_ptr first;
  auto wait = [&](const WorkPtr& work) {
    if (work == nullptr) return;
    try {
      // No deadline of its own: a thread that waits on an operation of a built-in group
      // that has not started runs it itself (no hand-off to the group's worker thread, and
      // its waits may poll). The operation's own timeout (the group's) ends the wait for
      // ranks that never join.
      work->wait();
    } catch (...) {
      if (first == nullptr) first = std::current_exception();
    }
  };
  wait(control_work_);
  for (size_t b = 0; b < next_bucket_; ++b) wait(buckets_[b].work);
  return first;
}

void Reducer::write_gradients_locked() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (globally_unused_locked(i)) continue;  // no rank has a gradient: leave grad untouched
    const Param& p = params_[i];
    Bucket& bucket = buckets_[p.bucket];
    const ::torch::Tensor& view = bucket.grad.gradients[p.slot];
    ::torch::Tensor& grad = p.tensor.mutable_grad();
    if (!grad.defined()) {
      if (bucket.in_place) {
        grad = view;  // the staging tensor becomes the gradient: the next pass makes another
        bucket.staging = ::torch::Tensor();
      } else {
        grad = options_.gradient_as_bucket_view ? view : view.clone();
      }
    } else if (grad.data_ptr() != view.data_ptr()) {
      grad.copy_(view);
    }
  }
}

bool Reducer::globally_unused_locked(size_t index) const {
  return handle_unused_ && control_[2 + index] == 0;
}

std::string Reducer::describe_locked(const std::vector<size_t>& indices) const {
  constexpr size_t kMaxNames = 10;
  std::string out;
  for (size_t k = 0; k < indices.size() && k < kMaxNames; ++k) {
    if (k > 0) out += ", ";
    out += "'" + params_[indices[k]].name + "'";
  }
  if (indices.size() > kMaxNames) {
    out += ::tdist::detail::str_cat(" and ", indices.size() - kMaxNames, " more");
  }
  return out;
}

}  // namespace tdist::torch
