// The Reducer's buckets: assigning parameters to buckets, allocating them, and the one
// rebuild after the first iteration in the order rank 0 saw gradients become ready.
#include <algorithm>
#include <map>

#include "reducer.h"
#include "tdist/error.h"

namespace tdist::torch {
namespace {

size_t megabytes_to_bytes(double mb) { return static_cast<size_t>(mb * 1024 * 1024); }

}  // namespace

std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order,
                                                const std::vector<::torch::Tensor>& params,
                                                size_t first_bytes, size_t cap_bytes,
                                                size_t own_bytes) {
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    bool first = true;
  };
  std::map<c10::ScalarType, Open> open;  // one open bucket per dtype
  std::vector<std::vector<size_t>> buckets;
  for (size_t i : order) {
    const ::torch::Tensor& t = params[i];
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes >= own_bytes) {
      buckets.push_back({i});
      continue;
    }
    Open& o = open[t.scalar_type()];
    o.members.push_back(i);
    o.bytes += bytes;
    if (o.bytes >= (o.first ? first_bytes : cap_bytes)) {
      buckets.push_back(std::move(o.members));
      o.members.clear();
      o.bytes = 0;
      o.first = false;
    }
  }
  for (auto& [dtype, o] : open) {
    if (!o.members.empty()) buckets.push_back(std::move(o.members));
  }
  std::vector<size_t> position(params.size());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  // In the order they fill up: a bucket can launch once its last member is ready.
  std::sort(buckets.begin(), buckets.end(),
            [&](const auto& a, const auto& b) { return position[a.back()] < position[b.back()]; });
  return buckets;
}

void Reducer::build_buckets_locked(const std::vector<size_t>& order) {
  std::vector<::torch::Tensor> tensors;
  for (const Param& p : params_) tensors.push_back(p.tensor);
  std::vector<std::vector<size_t>> groups =
      assign_buckets(order, tensors, megabytes_to_bytes(options_.first_bucket_mb),
                     megabytes_to_bytes(options_.bucket_cap_mb), kOwnBucketBytes);
  ::torch::NoGradGuard no_grad;
  std::vector<Bucket> fresh(groups.size());
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = fresh[b];
    bucket.params = std::move(groups[b]);
    int64_t total = 0;
    for (size_t i : bucket.params) {
      const ::torch::Tensor& t = params_[i].tensor;
      total += t.numel();
      bucket.bytes += static_cast<size_t>(t.numel()) * t.element_size();
    }
    bucket.grad.index = b;
    bucket.grad.is_last = b + 1 == groups.size();
    if (bucket.params.size() == 1) {
      // Reduced in the gradient itself, no buffer of its own (attach_in_place_locked, each pass).
      Param& p = params_[bucket.params[0]];
      bucket.in_place = true;
      bucket.grad.gradients.emplace_back();
      bucket.grad.parameters.push_back(p.tensor);
      // A view into a bucket this rebuild drops would keep all of it alive.
      ::torch::Tensor& grad = p.tensor.mutable_grad();
      if (options_.gradient_as_bucket_view && grad.defined()) grad = grad.clone();
      p.bucket = b;
      p.slot = 0;
      bucket.pending = 1;
      continue;
    }
    bucket.grad.buffer = ::torch::zeros({total}, params_[bucket.params[0]].tensor.options());
    int64_t offset = 0;
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      Param& p = params_[bucket.params[k]];
      const int64_t n = p.tensor.numel();
      // Shares the bucket's storage without being an autograd view: gradients must allow
      // detach_(), which LibTorch's Optimizer::zero_grad calls.
      ::torch::Tensor view = ::torch::empty({0}, bucket.grad.buffer.options())
                                 .set_(bucket.grad.buffer.storage(), offset, p.tensor.sizes());
      offset += n;
      bucket.grad.gradients.push_back(view);
      bucket.grad.parameters.push_back(p.tensor);
      p.bucket = b;
      p.slot = k;
      ::torch::Tensor& grad = p.tensor.mutable_grad();
      if (options_.gradient_as_bucket_view && grad.defined()) {
        view.copy_(grad);
        grad = view;
      }
    }
    bucket.pending = bucket.params.size();
  }
  buckets_ = std::move(fresh);
}

void Reducer::rebuild_buckets_locked() {
  const size_t n = params_.size();
  // Rank 0's order for everyone: buckets must hold the same parameters on every rank.
  std::vector<int64_t> order(n, -1);
  if (group_->rank() == 0) {
    TDIST_CHECK(ready_order_.size() == n, Error, "DDP: the first iteration saw ",
                ready_order_.size(), " of ", n, " gradients, cannot rebuild the buckets");
    std::copy(ready_order_.begin(), ready_order_.end(), order.begin());
  }
  group_->broadcast(order.data(), n, DType::kI64, 0)->wait();
  std::vector<size_t> indices;
  std::vector<char> seen(n, 0);
  for (int64_t v : order) {
    TDIST_CHECK(v >= 0 && static_cast<size_t>(v) < n && !seen[static_cast<size_t>(v)], DesyncError,
                "DDP: rank 0's gradient order does not fit this rank's ", n,
                " parameters (do all ranks have the same model?)");
    seen[static_cast<size_t>(v)] = 1;
    indices.push_back(static_cast<size_t>(v));
  }
  build_buckets_locked(indices);
  ready_order_.clear();
  rebuild_due_ = false;
  rebuilt_ = true;
}

std::vector<std::vector<std::string>> Reducer::bucket_assignment() const {
  MutexLock lock(mu_);
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    std::vector<std::string> names;
    for (size_t i : b.params) names.push_back(params_[i].name);
    out.push_back(std::move(names));
  }
  return out;
}

bool Reducer::buckets_rebuilt() const {
  MutexLock lock(mu_);
  return rebuilt_;
}

}  // namespace tdist::torch
