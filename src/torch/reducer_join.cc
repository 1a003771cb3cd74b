// The Reducer under a Join (tdist/torch/join.h): a rank that ran out of inputs shadows the
// others' synchronized backward passes, the pass counts are made equal at the end, and the
// default reduction can average over the ranks that still have inputs.
#include <algorithm>
#include <exception>
#include <limits>

#include "reducer.h"
#include "tdist/error.h"

namespace tdist::torch {

void Reducer::shadow_backward() {
  MutexLock lock(mu_);
  TDIST_CHECK(phase_ != Phase::kReducing, Error, "DDP: synchronized backward pass ", synced_passes_,
              " of this rank did not finish, so it cannot shadow the other ranks' passes");
  ++synced_passes_;
  // MAX's identity for the pass counts (the others compare only theirs), no parameter used.
  control_.assign(2 + (handle_unused_ ? params_.size() : 0), 0);
  control_[0] = std::numeric_limits<int64_t>::min();
  control_[1] = std::numeric_limits<int64_t>::min();
  launch_control_locked();

  // Zero-filled copies of the buckets, laid out as the others' (same parameters, same
  // order), through the same hook in the same order.
  ::torch::NoGradGuard no_grad;
  std::vector<GradBucket> zeros(buckets_.size());
  std::vector<WorkPtr> works(buckets_.size());
  std::exception_ptr error;
  // Read here: the lambda runs inside comm_stream_.run(), where the analysis cannot see mu_.
  CommHook& hook = *hook_;
  try {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const Bucket& bucket = buckets_[b];
      GradBucket& zero = zeros[b];
      zero.index = bucket.grad.index;
      zero.is_last = bucket.grad.is_last;
      zero.parameters = bucket.grad.parameters;
      int64_t total = 0;
      for (size_t i : bucket.params) total += params_[i].tensor.numel();
      zero.buffer = ::torch::zeros({total}, params_[bucket.params[0]].tensor.options());
      int64_t offset = 0;
      for (size_t i : bucket.params) {
        const ::torch::Tensor& p = params_[i].tensor;
        zero.gradients.push_back(zero.buffer.narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
      works[b] = comm_stream_.run([&] { return hook.run(*group_, zero); });
      TDIST_CHECK(works[b] != nullptr, Error, "DDP: the comm hook returned no Work for bucket ",
                  zero.index);
    }
  } catch (...) {
    error = std::current_exception();
  }
  // Everything launched ends before `zeros` goes, even when something failed.
  auto wait = [&error](const WorkPtr& work) {
    if (work == nullptr) return;
    try {
      work->wait();
    } catch (...) {
      if (error == nullptr) error = std::current_exception();
    }
  };
  wait(control_work_);
  for (const WorkPtr& w : works) wait(w);
  control_work_.reset();
  comm_stream_.join();
  if (error != nullptr) std::rethrow_exception(error);
  for (const GradBucket& zero : zeros) hook.finish(*group_, zero);

  if (control_on_device_) {
    const ::torch::Tensor host = control_tensor_.cpu();
    std::copy_n(host.data_ptr<int64_t>(), control_.size(), control_.begin());
  }
  // The others' count (they checked that they agree): this rank ran their passes too.
  if (control_[0] > 0) {
    backward_passes_ = std::max(backward_passes_, static_cast<uint64_t>(control_[0]));
  }
  if (synced_passes_ == 1 && !rebuilt_ &&
      (!options_.find_unused_parameters || options_.static_graph)) {
    // As after a pass of its own: the buckets are rebuilt before the next iteration, in
    // rank 0's order; a rank 0 that ran no pass offers the present order.
    ready_order_.clear();
    for (const Bucket& b : buckets_) {
      ready_order_.insert(ready_order_.end(), b.params.begin(), b.params.end());
    }
    rebuild_due_ = true;
  }
}

std::pair<uint64_t, uint64_t> Reducer::pass_counts() const {
  MutexLock lock(mu_);
  return {backward_passes_, synced_passes_};
}

void Reducer::set_pass_counts(uint64_t backward_passes, uint64_t synced_passes) {
  MutexLock lock(mu_);
  backward_passes_ = backward_passes;
  synced_passes_ = synced_passes;
}

void Reducer::rescale_average_locked() {
  const int world = group_->size();
  if (custom_hook_ || average_over_ <= 0 || average_over_ == world) return;
  // The default hook averaged over the group; the ranks that joined added zeros.
  const double scale = static_cast<double>(world) / average_over_;
  ::torch::NoGradGuard no_grad;
  for (Bucket& b : buckets_) b.grad.buffer.mul_(scale);
}

}  // namespace tdist::torch
