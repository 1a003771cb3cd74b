#include "shard_param.h"

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "shard_pool.h"
#include "tdist/error.h"

namespace tdist::torch {
namespace {

// A tensor's storage, emptied or refilled in place: tensors that share it (autograd's
// saved views) follow.
void free_storage(const ::torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void alloc_storage(const ::torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  s->set_data_ptr_noswap(shard_pool::allocate(nbytes, t.device()));
  s->set_nbytes(nbytes);
}

}  // namespace

ShardParam::ShardParam(std::string name, ::torch::Tensor param, int rank, int world)
    : name_(std::move(name)),
      param_(std::move(param)),
      requires_grad_(param_.requires_grad()),
      shape_(param_.sizes().vec()),
      dtype_(param_.scalar_type()),
      rank_(rank),
      world_(world),
      rows_(param_.dim() == 0 ? 1 : param_.size(0)),
      row_numel_(rows_ == 0 ? 0 : param_.numel() / rows_),
      chunk_((rows_ + world - 1) / world) {
  if (param_.dim() > 0 && rows_ == 0) {  // an empty parameter: its row size still counts
    row_numel_ = 1;
    for (size_t d = 1; d < shape_.size(); ++d) row_numel_ *= shape_[d];
  }
}

int64_t ShardParam::first_row(int rank) const { return std::min(rows_, rank * chunk_); }

int64_t ShardParam::rows_of(int rank) const {
  return std::max<int64_t>(0, std::min(chunk_, rows_ - rank * chunk_));
}

void ShardParam::shard_into(const ::torch::Tensor& slot) {
  ::torch::NoGradGuard no_grad;
  const int64_t mine = rows_of(rank_);
  std::vector<int64_t> shard_shape = shape_;
  if (shard_shape.empty()) shard_shape.push_back(1);
  shard_shape[0] = mine;
  shard_ = slot.narrow(0, 0, mine * row_numel_).view(shard_shape);
  const ::torch::Tensor whole = param_.detach().reshape({rows_, row_numel_});
  shard_.view({mine, row_numel_}).copy_(whole.narrow(0, first_row(rank_), mine));
  ::torch::TensorOptions options = param_.options().requires_grad(false);
  std::vector<int64_t> padded_shape = shape_;
  if (padded_shape.empty()) padded_shape.push_back(1);
  padded_shape[0] = world_ * chunk_;
  full_padded_ = ::torch::empty(padded_shape, options);
  full_ = full_padded_.narrow(0, 0, rows_).view(shape_);
  reshard();
}

bool ShardParam::holds_shard() const {
  return param_.data_ptr() == shard_.data_ptr() && param_.sizes() == shard_.sizes() &&
         param_.scalar_type() == shard_.scalar_type();
}

void ShardParam::unshard_from(const ::torch::Tensor& gathered, int64_t offset,
                              c10::ScalarType dtype) {
  ::torch::NoGradGuard no_grad;
  if (full_padded_.scalar_type() != dtype) {  // param_dtype: whole tensors in that dtype
    full_padded_ = shard_pool::empty(full_padded_.sizes(), full_padded_.options().dtype(dtype));
    full_ = full_padded_.narrow(0, 0, rows_).view(shape_);
  }
  alloc_storage(full_padded_, static_cast<size_t>(full_padded_.numel()) *
                                  static_cast<size_t>(full_padded_.element_size()));
  full_padded_.view({world_, padded_numel()}).copy_(gathered.narrow(1, offset, padded_numel()));
  param_.set_data(full_);
  sharded_ = false;
}

void ShardParam::reshard() {
  param_.set_data(shard_);
  free_storage(full_padded_);
  sharded_ = true;
}

int64_t ShardParam::full_bytes() const {
  return static_cast<int64_t>(full_padded_.storage().nbytes());
}

void ShardParam::scatter_grad_into(const ::torch::Tensor& grad, const ::torch::Tensor& input,
                                   int64_t offset) const {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor dst = input.narrow(1, offset, padded_numel());  // [world, padded]
  if (!grad.defined()) {
    dst.zero_();
    return;
  }
  const ::torch::Tensor rows = grad.reshape({rows_, row_numel_});
  if (rows_ == world_ * chunk_) {
    dst.copy_(rows.view({world_, padded_numel()}));
    return;
  }
  ::torch::Tensor padded = ::torch::zeros({world_ * chunk_, row_numel_}, input.options());
  padded.narrow(0, 0, rows_).copy_(rows);
  dst.copy_(padded.view({world_, padded_numel()}));
}

}  // namespace tdist::torch
