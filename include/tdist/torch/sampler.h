// DistributedSampler: the part of a dataset that one rank of a data-parallel job reads,
// index for index what torch.utils.data.distributed.DistributedSampler yields for the
// same arguments, as a LibTorch sampler:
//
//   tdist::torch::DistributedSampler sampler(dataset.size().value());   // default group
//   auto loader = ::torch::data::make_data_loader(dataset, sampler, options);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);           // reaches the loader's copy (below)
//     for (auto& batch : *loader) ...
//   }
//
// Order (as PyTorch): with shuffle, torch::randperm(n) from a CPU generator seeded with
// seed + epoch (two's complement wrap-around, as torch.Generator.manual_seed), else
// 0..n-1. Without drop_last the list is padded to a multiple of num_replicas by repeating
// it from its start (as often as needed when num_replicas > n); with drop_last its tail is
// cut to the largest multiple. Rank r takes positions r, r + num_replicas, ... Every rank
// yields size() indices. n = 0 is valid and yields nothing (PyTorch does not raise
// either); so does drop_last with n < num_replicas.
//
// Evaluation (beyond PyTorch): padding makes some samples appear on two ranks. Padding
// is always a suffix of a rank's list: the first num_real_samples() positions are real,
// the rest repeat samples another position already holds. Counting only the first
// num_real_samples() samples of each rank counts every sample of the dataset exactly once
// over all ranks (with drop_last, every sample that is kept). A loader yields samples in
// position order (DataLoaderOptions::enforce_ordering, the default), so the k-th sample
// of an epoch has position k.
//
// Copies share the epoch: make_data_loader takes the sampler by value, and LibTorch's
// loaders never hand their copy back, so set_epoch on the sampler you kept must reach the
// loader's copy. It does at that copy's next reset(), which every loader begin() calls.
// Positions and index lists stay per copy. Moving is copying, so no moved-from sampler
// loses the shared epoch.
//
// Failures: InvalidArgument for num_replicas < 1 or a rank outside [0, num_replicas)
// (PyTorch's ValueError); tdist::Error when num_replicas or rank is left to the default
// group and none is initialized. Thread-safety: set_epoch and epoch may be called from
// any thread; everything else needs external synchronization per copy.
#pragma once

#include <torch/data/samplers/base.h>
#include <torch/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tdist::torch {

struct DistributedSamplerOptions {
  // Default: tdist::get_world_size() / get_rank() of the default process group.
  std::optional<int> num_replicas;
  std::optional<int> rank;
  bool shuffle = true;
  // Must be the same on every rank.
  int64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public ::torch::data::samplers::Sampler<> {
 public:
  // dataset_size: the number of samples (PyTorch's len(dataset)). Starts at epoch 0.
  explicit DistributedSampler(size_t dataset_size, DistributedSamplerOptions options = {});

  DistributedSampler(const DistributedSampler&) = default;
  DistributedSampler& operator=(const DistributedSampler&) = default;
  ~DistributedSampler() override = default;

  // Sets the epoch of this sampler and all its copies, then rewinds this copy to the
  // order of the new epoch (copies switch at their next reset()).
  void set_epoch(int64_t epoch);
  int64_t epoch() const;

  // Rewinds to the first position, in the order of the current epoch. new_size replaces
  // the dataset size (and with it size() and num_real_samples()).
  void reset(::torch::optional<size_t> new_size = ::torch::nullopt) override;

  // The next up to batch_size indices; nullopt once all size() were handed out.
  ::torch::optional<std::vector<size_t>> next(size_t batch_size) override;

  // Saves the epoch, the position and the dataset size; load restores the first two
  // into a sampler constructed with the same arguments (InvalidArgument when the
  // dataset size differs or the position is past size()).
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  // This rank's indices for the current epoch, padding included (PyTorch's list(iter)).
  const std::vector<size_t>& indices() const { return indices_; }
  // Indices per rank and epoch (PyTorch's len(sampler)).
  size_t size() const { return num_samples_; }
  // Positions [0, num_real_samples()) hold real samples, the rest padding (see above).
  size_t num_real_samples() const;
  bool is_padding(size_t position) const { return position >= num_real_samples(); }

  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  void set_size(size_t dataset_size);

  size_t dataset_size_ = 0;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  int64_t seed_;
  bool drop_last_;
  size_t num_samples_ = 0;
  std::shared_ptr<std::atomic<int64_t>> epoch_;
  std::vector<size_t> indices_;
  size_t position_ = 0;
};

}  // namespace tdist::torch
