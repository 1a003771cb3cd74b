// DistributedSampler (sampler.h): PyTorch's index arithmetic over at::randperm, with the
// epoch shared between copies so set_epoch reaches a data loader's copy.
#include "tdist/torch/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <string>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace tdist::torch {
namespace {

// The order of 0..n-1 for one epoch, as DistributedSampler.__iter__ builds it before
// padding: torch.Generator().manual_seed(seed + epoch) then torch.randperm(n, generator).
std::vector<size_t> epoch_order(size_t n, bool shuffle, int64_t seed, int64_t epoch) {
  std::vector<size_t> order(n);
  if (!shuffle) {
    for (size_t i = 0; i < n; ++i) order[i] = i;
    return order;
  }
  // Python's manual_seed maps a negative seed to its two's complement; unsigned addition
  // gives that, and the same sum as Python's for every seed + epoch below 2^64.
  uint64_t generator_seed = static_cast<uint64_t>(seed) + static_cast<uint64_t>(epoch);
  at::Generator generator = at::detail::createCPUGenerator(generator_seed);
  ::torch::Tensor perm = at::randperm(static_cast<int64_t>(n), generator, at::kLong);
  const int64_t* p = perm.data_ptr<int64_t>();
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<size_t>(p[i]);
  return order;
}

int64_t read_scalar(::torch::serialize::InputArchive& archive, const std::string& key) {
  ::torch::Tensor value = ::torch::empty({1}, ::torch::kInt64);
  archive.read(key, value, /*is_buffer=*/true);
  return value.item<int64_t>();
}

void write_scalar(::torch::serialize::OutputArchive& archive, const std::string& key,
                  int64_t value) {
  archive.write(key, ::torch::tensor({value}, ::torch::kInt64), /*is_buffer=*/true);
}

}  // namespace

DistributedSampler::DistributedSampler(size_t dataset_size, DistributedSamplerOptions options)
    : num_replicas_(options.num_replicas ? *options.num_replicas : get_world_size()),
      rank_(options.rank ? *options.rank : get_rank()),
      shuffle_(options.shuffle),
      seed_(options.seed),
      drop_last_(options.drop_last),
      epoch_(std::make_shared<std::atomic<int64_t>>(0)) {
  TDIST_CHECK(num_replicas_ >= 1, InvalidArgument, "DistributedSampler: num_replicas ",
              num_replicas_, " must be at least 1");
  TDIST_CHECK(rank_ >= 0 && rank_ < num_replicas_, InvalidArgument,
              "DistributedSampler: invalid rank ", rank_, ", rank should be in the interval [0, ",
              num_replicas_ - 1, "]");
  set_size(dataset_size);
  reset();
}

void DistributedSampler::set_size(size_t dataset_size) {
  dataset_size_ = dataset_size;
  const auto replicas = static_cast<size_t>(num_replicas_);
  // PyTorch's ceil((n - R) / R) for drop_last equals floor(n / R) whenever it applies.
  num_samples_ = drop_last_ ? dataset_size / replicas : (dataset_size + replicas - 1) / replicas;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_->store(epoch);
  reset();
}

int64_t DistributedSampler::epoch() const { return epoch_->load(); }

void DistributedSampler::reset(::torch::optional<size_t> new_size) {
  if (new_size) set_size(*new_size);
  const std::vector<size_t> order = epoch_order(dataset_size_, shuffle_, seed_, epoch());
  // Position p is element rank + p * R of the padded (or cut) list; padding repeats the
  // order cyclically, so element g of it is order[g % n].
  indices_.resize(num_samples_);
  for (size_t p = 0; p < num_samples_; ++p) {
    const size_t g = static_cast<size_t>(rank_) + p * static_cast<size_t>(num_replicas_);
    indices_[p] = order[g % dataset_size_];
  }
  position_ = 0;
}

::torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (position_ >= indices_.size()) return ::torch::nullopt;
  const size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                            indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

size_t DistributedSampler::num_real_samples() const {
  // With drop_last every position holds element rank + p * R < n of the order.
  if (drop_last_) return num_samples_;
  const auto rank = static_cast<size_t>(rank_);
  if (dataset_size_ <= rank) return 0;
  // The positions p with rank + p * R < n.
  const auto replicas = static_cast<size_t>(num_replicas_);
  return std::min(num_samples_, (dataset_size_ - rank + replicas - 1) / replicas);
}

void DistributedSampler::save(::torch::serialize::OutputArchive& archive) const {
  write_scalar(archive, "epoch", epoch());
  write_scalar(archive, "position", static_cast<int64_t>(position_));
  write_scalar(archive, "dataset_size", static_cast<int64_t>(dataset_size_));
}

void DistributedSampler::load(::torch::serialize::InputArchive& archive) {
  const int64_t saved_size = read_scalar(archive, "dataset_size");
  TDIST_CHECK(saved_size == static_cast<int64_t>(dataset_size_), InvalidArgument,
              "DistributedSampler::load: the archive is of a dataset of ", saved_size,
              " samples, this sampler's has ", dataset_size_);
  const int64_t position = read_scalar(archive, "position");
  TDIST_CHECK(position >= 0 && static_cast<size_t>(position) <= num_samples_, InvalidArgument,
              "DistributedSampler::load: position ", position, " is outside [0, ", num_samples_,
              "]");
  set_epoch(read_scalar(archive, "epoch"));
  position_ = static_cast<size_t>(position);
}

}  // namespace tdist::torch
