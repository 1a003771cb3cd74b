// The plain communication hooks: all_reduce, and all_reduce of a 16-bit copy.
#include "tdist/torch/comm_hooks.h"

#include "bucket_reduce.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch {

WorkPtr all_reduce_flat(ProcessGroup& group, const ::torch::Tensor& t, ReduceOp op) {
  if (t.is_cuda()) return all_reduce_async(t, op, group.shared_from_this());
  return group.all_reduce(t.data_ptr(), static_cast<size_t>(t.numel()), to_dtype(t.scalar_type()),
                          op);
}

void CommHook::finish(ProcessGroup& /*group*/, const GradBucket& /*bucket*/) {}

namespace {

class AllReduceHook final : public CommHook {
 public:
  WorkPtr run(ProcessGroup& group, const GradBucket& bucket) override {
    return all_reduce_flat(group, bucket.buffer, ReduceOpKind::kAvg);
  }
};

// As torch's fp16_compress_hook / bf16_compress_hook: divide before the sum, so that the
// 16-bit sum cannot overflow where the average would not.
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(c10::ScalarType type) : type_(type) {}

  WorkPtr run(ProcessGroup& group, const GradBucket& bucket) override {
    if (compressed_.size() <= bucket.index) compressed_.resize(bucket.index + 1);
    ::torch::Tensor& c = compressed_[bucket.index];
    if (!c.defined() || c.numel() != bucket.buffer.numel()) {
      c = ::torch::empty({bucket.buffer.numel()}, bucket.buffer.options().dtype(type_));
    }
    c.copy_(bucket.buffer).div_(group.size());
    return all_reduce_flat(group, c, ReduceOpKind::kSum);
  }

  void finish(ProcessGroup& /*group*/, const GradBucket& bucket) override {
    bucket.buffer.copy_(compressed_[bucket.index]);
  }

 private:
  const c10::ScalarType type_;
  std::vector<::torch::Tensor> compressed_;  // per bucket, alive while its Work runs
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllReduceHook>(); }

std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<CompressHook>(c10::ScalarType::Half);
}

std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CompressHook>(c10::ScalarType::BFloat16);
}

}  // namespace tdist::torch
