// PowerSGD, after torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook.
// run() adds the error feedback, computes P = M Q and starts the all_reduce of the
// uncompressed gradients and of the Ps; finish() orthogonalizes P, computes and
// all_reduces Q = M^T P, and writes M ~ P Q^T into the bucket.
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <random>

#include "bucket_reduce.h"
#include "tdist/error.h"
#include "tdist/torch/comm_hooks.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

// Gram-Schmidt on the columns of `m` (rows x rank), in place. An all-zero column stays
// zero (torch divides by its zero norm and gets NaN).
void orthogonalize(const ::torch::Tensor& m, double epsilon) {
  const int64_t rank = m.size(1);
  for (int64_t i = 0; i < rank; ++i) {
    ::torch::Tensor col = m.narrow(1, i, 1);
    const double norm = col.norm().item<double>();
    if (norm + epsilon > 0) col.div_(norm + epsilon);
    if (i + 1 < rank) {
      ::torch::Tensor rest = m.narrow(1, i + 1, rank - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

class PowerSGDHook final : public CommHook {
 public:
  explicit PowerSGDHook(const PowerSGDOptions& options)
      : options_(options), rng_(options.random_seed) {}

  WorkPtr run(ProcessGroup& group, const GradBucket& bucket) override;
  void finish(ProcessGroup& group, const GradBucket& bucket) override;

 private:
  struct BucketState {
    bool compressed = false;  // this pass uses PowerSGD (else plain all_reduce)
    ::torch::Tensor error;    // what compression lost here last time
    ::torch::Tensor input;    // the bucket before compression (for the error)
    ::torch::Tensor p_memory, q_memory, uncompressed;
    std::vector<::torch::Tensor> matrices, ps, qs, uncompressed_tensors;
    WorkPtr uncompressed_work;
  };

  BucketState& state(size_t index) {
    if (states_.size() <= index) states_.resize(index + 1);
    return states_[index];
  }
  void split(const GradBucket& bucket, BucketState& s);

  const PowerSGDOptions options_;
  std::mt19937_64 rng_;  // same sequence on every rank: seeds of the random Qs
  int64_t iter_ = 0;
  std::vector<BucketState> states_;
};

// Sorts the bucket's gradients into matrices worth compressing (with views of their P and
// Q in s.p_memory / s.q_memory) and the rest. With warm start the Qs keep last
// iteration's values; otherwise (and the first time) they are drawn at random.
void PowerSGDHook::split(const GradBucket& bucket, BucketState& s) {
  s.matrices.clear();
  s.uncompressed_tensors.clear();
  std::vector<int64_t> ranks;
  int64_t p_total = 0;
  int64_t q_total = 0;
  for (const ::torch::Tensor& g : bucket.gradients) {
    if (g.dim() >= 2 && g.size(0) > 0) {
      const int64_t n = g.size(0);
      const int64_t m = g.numel() / n;
      const int64_t r = std::min({n, m, options_.matrix_approximation_rank});
      if (static_cast<double>((n + m) * r) * options_.min_compression_rate <
          static_cast<double>(n * m)) {
        s.matrices.push_back(g.view({n, m}));
        ranks.push_back(r);
        p_total += n * r;
        q_total += m * r;
        continue;
      }
    }
    s.uncompressed_tensors.push_back(g);
  }
  const auto options = bucket.buffer.options();  // the bucket's device (CPU or CUDA)
  const bool reuse = options_.warm_start && s.p_memory.defined() && s.p_memory.numel() == p_total &&
                     s.q_memory.numel() == q_total;
  if (!reuse) {
    s.p_memory = ::torch::empty({p_total}, options);
    s.q_memory = ::torch::empty({q_total}, options);
  }
  s.ps.clear();
  s.qs.clear();
  int64_t p_offset = 0;
  int64_t q_offset = 0;
  for (size_t k = 0; k < s.matrices.size(); ++k) {
    const int64_t n = s.matrices[k].size(0);
    const int64_t m = s.matrices[k].size(1);
    s.ps.push_back(s.p_memory.narrow(0, p_offset, n * ranks[k]).view({n, ranks[k]}));
    s.qs.push_back(s.q_memory.narrow(0, q_offset, m * ranks[k]).view({m, ranks[k]}));
    p_offset += n * ranks[k];
    q_offset += m * ranks[k];
  }
  if (!reuse) {
    // Fresh random Qs, equal on every rank (the seed sequence is).
    at::Generator generator = at::detail::createCPUGenerator(rng_() % 1000000000);
    // Drawn on the CPU (the same numbers for every device), then copied.
    const auto cpu = ::torch::TensorOptions().dtype(bucket.buffer.scalar_type());
    for (::torch::Tensor& q : s.qs) q.copy_(at::randn(q.sizes(), generator, cpu));
  }
}

WorkPtr PowerSGDHook::run(ProcessGroup& group, const GradBucket& bucket) {
  BucketState& s = state(bucket.index);
  const int64_t iter = iter_;
  if (bucket.is_last) ++iter_;
  s.compressed = iter >= options_.start_powerSGD_iter;
  if (!s.compressed) {
    return all_reduce_flat(group, bucket.buffer, ReduceOpKind::kAvg);
  }
  ::torch::NoGradGuard no_grad;
  if (options_.use_error_feedback) {
    if (s.error.defined() && s.error.numel() == bucket.buffer.numel()) {
      bucket.buffer.add_(s.error);
    }
    s.input = bucket.buffer.clone();
  }
  split(bucket, s);
  for (const ::torch::Tensor& q : s.qs) orthogonalize(q, options_.orthogonalization_epsilon);
  for (size_t k = 0; k < s.matrices.size(); ++k) {
    ::torch::matmul_out(s.ps[k], s.matrices[k], s.qs[k]);
  }
  std::vector<::torch::Tensor> flat;
  for (const ::torch::Tensor& t : s.uncompressed_tensors) flat.push_back(t.reshape(-1));
  s.uncompressed = flat.empty() ? ::torch::empty({0}, bucket.buffer.options()) : ::torch::cat(flat);
  s.uncompressed_work = all_reduce_flat(group, s.uncompressed, ReduceOpKind::kAvg);
  // P is orthogonalized after the sum, so it needs no division.
  return all_reduce_flat(group, s.p_memory, ReduceOpKind::kSum);
}

void PowerSGDHook::finish(ProcessGroup& group, const GradBucket& bucket) {
  BucketState& s = states_[bucket.index];
  if (!s.compressed) return;
  ::torch::NoGradGuard no_grad;
  s.uncompressed_work->wait();
  int64_t offset = 0;
  for (const ::torch::Tensor& t : s.uncompressed_tensors) {
    t.copy_(s.uncompressed.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  for (const ::torch::Tensor& p : s.ps) orthogonalize(p, options_.orthogonalization_epsilon);
  for (size_t k = 0; k < s.matrices.size(); ++k) {
    ::torch::matmul_out(s.qs[k], s.matrices[k].t(), s.ps[k]);
  }
  all_reduce_flat(group, s.q_memory, ReduceOpKind::kAvg)->wait();
  for (size_t k = 0; k < s.matrices.size(); ++k) {
    ::torch::matmul_out(s.matrices[k], s.ps[k], s.qs[k].t());
  }
  if (options_.use_error_feedback) s.error = s.input - bucket.buffer;
  if (!options_.warm_start) {
    s.p_memory = ::torch::Tensor();
    s.q_memory = ::torch::Tensor();
  }
}

}  // namespace

std::shared_ptr<CommHook> powerSGD_hook(PowerSGDOptions options) {
  TDIST_CHECK(options.matrix_approximation_rank >= 1, InvalidArgument,
              "powerSGD_hook: matrix_approximation_rank must be >= 1 (got ",
              options.matrix_approximation_rank, ")");
  TDIST_CHECK(options.start_powerSGD_iter >= 0, InvalidArgument,
              "powerSGD_hook: start_powerSGD_iter must be >= 0 (got ", options.start_powerSGD_iter,
              ")");
  TDIST_CHECK(
      options.start_powerSGD_iter >= 2 || (!options.use_error_feedback && !options.warm_start),
      InvalidArgument,
      "powerSGD_hook: start_powerSGD_iter must be >= 2 with use_error_feedback or "
      "warm_start (got ",
      options.start_powerSGD_iter,
      "): DDP rebuilds its buckets after the first iteration, which renumbers them");
  return std::make_shared<PowerSGDHook>(options);
}

}  // namespace tdist::torch
