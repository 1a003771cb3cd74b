// DistributedSampler (sampler.h): PyTorch's index arithmetic over at::randperm, with the
// epoch, the resume in force and the handed-out positions shared between copies so that
// set_epoch and resume reach a data loader's copy and consumed_mask sees what it read.
#include "tdist/torch/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <string>

#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::torch {

struct DistributedSampler::Resume {
  int64_t epoch = 0;
  // The dataset size it was made for; a copy reset to another size ends it.
  size_t dataset_size = 0;
  // The positions consumed before the resume: at least the bytes of the real positions,
  // more where a drop_last world of another size handed in a longer mask; no bit at or
  // past dataset_size.
  std::vector<uint8_t> consumed;
  // The real positions not in `consumed`, increasing: the resumed epoch's list.
  std::vector<size_t> remaining;
};

struct DistributedSampler::Shared {
  Mutex mu;
  int64_t epoch TDIST_GUARDED_BY(mu) = 0;
  // The resume in force, or null.
  std::shared_ptr<const Resume> resume TDIST_GUARDED_BY(mu);
  // The number of the most recent reset of any copy: the copy (and its later copies) with
  // this pass_ is the one whose next() marks `mask`.
  uint64_t pass TDIST_GUARDED_BY(mu) = 0;
  // consumed_mask(): that pass's base (a resume's consumed positions) and what it handed out.
  std::vector<uint8_t> mask TDIST_GUARDED_BY(mu);
};

namespace {

size_t mask_bytes(size_t positions) { return (positions + 7) / 8; }

bool test_bit(const std::vector<uint8_t>& mask, size_t g) {
  return g / 8 < mask.size() && ((mask[g / 8] >> (g % 8)) & 1) != 0;
}

void set_bit(std::vector<uint8_t>& mask, size_t g) {
  mask[g / 8] = static_cast<uint8_t>(mask[g / 8] | (1U << (g % 8)));
}

// Rank `rank`'s positions among `count` dealt round robin over `replicas`, padded to
// ceil(count / replicas) each: the number of them that are real.
size_t real_share(size_t count, size_t replicas, size_t rank, size_t per_rank) {
  if (count <= rank) return 0;
  return std::min(per_rank, (count - rank + replicas - 1) / replicas);
}

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
      shared_(std::make_shared<Shared>()) {
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
  {
    MutexLock lock(shared_->mu);
    if (shared_->resume != nullptr && shared_->resume->epoch != epoch) shared_->resume = nullptr;
    shared_->epoch = epoch;
  }
  reset();
}

int64_t DistributedSampler::epoch() const {
  MutexLock lock(shared_->mu);
  return shared_->epoch;
}

size_t DistributedSampler::real_positions() const {
  // Without drop_last the padded list is at least n long; with it, cut to floor(n / R) * R.
  const auto replicas = static_cast<size_t>(num_replicas_);
  return drop_last_ ? dataset_size_ / replicas * replicas : dataset_size_;
}

std::vector<uint8_t> DistributedSampler::consumed_mask() const {
  MutexLock lock(shared_->mu);
  return shared_->mask;
}

void DistributedSampler::resume(int64_t epoch, const std::vector<uint8_t>& consumed) {
  const size_t real = real_positions();
  const size_t own_bytes = mask_bytes(real);
  if (drop_last_) {
    // floor(n / R) * R differs between world sizes: a mask of another world may be shorter
    // or longer than this one's, never longer than the dataset's.
    TDIST_CHECK(consumed.size() <= mask_bytes(dataset_size_), InvalidArgument,
                "DistributedSampler::resume: the consumed mask has ", consumed.size(),
                " bytes; with drop_last it may have at most ", mask_bytes(dataset_size_),
                " (a dataset of ", dataset_size_, " samples; this world's mask has ", own_bytes,
                " bytes for its ", real, " real positions)");
  } else {
    TDIST_CHECK(consumed.size() == own_bytes, InvalidArgument,
                "DistributedSampler::resume: the consumed mask has ", consumed.size(),
                " bytes, the epoch's ", real, " real positions take ", own_bytes);
  }
  auto made = std::make_shared<Resume>();
  made->epoch = epoch;
  made->dataset_size = dataset_size_;
  made->consumed = consumed;
  made->consumed.resize(std::max(consumed.size(), own_bytes), 0);
  // Clear the bits past the dataset (the last byte's spare bits).
  for (size_t g = dataset_size_; g < made->consumed.size() * 8; ++g) {
    made->consumed[g / 8] = static_cast<uint8_t>(made->consumed[g / 8] & ~(1U << (g % 8)));
  }
  for (size_t g = 0; g < real; ++g) {
    if (!test_bit(made->consumed, g)) made->remaining.push_back(g);
  }
  {
    MutexLock lock(shared_->mu);
    shared_->epoch = epoch;
    shared_->resume = std::move(made);
  }
  reset();
}

void DistributedSampler::reset(::torch::optional<size_t> new_size) {
  if (new_size) set_size(*new_size);
  int64_t epoch = 0;
  std::shared_ptr<const Resume> resume;
  {
    MutexLock lock(shared_->mu);
    epoch = shared_->epoch;
    if (shared_->resume != nullptr && shared_->resume->dataset_size != dataset_size_) {
      shared_->resume = nullptr;
    }
    resume = shared_->resume;
  }
  const std::vector<size_t> order = epoch_order(dataset_size_, shuffle_, seed_, epoch);
  const auto rank = static_cast<size_t>(rank_);
  const auto replicas = static_cast<size_t>(num_replicas_);
  if (resume == nullptr) {
    // Position p is element rank + p * R of the padded (or cut) list; padding repeats the
    // order cyclically, so element g of it is order[g % n].
    set_size(dataset_size_);
    indices_.resize(num_samples_);
    for (size_t p = 0; p < num_samples_; ++p) {
      indices_[p] = order[(rank + p * replicas) % dataset_size_];
    }
    // With drop_last every position holds element rank + p * R < n of the order; without,
    // the positions p with rank + p * R < n are real.
    num_real_samples_ =
        drop_last_ ? num_samples_ : real_share(dataset_size_, replicas, rank, num_samples_);
  } else {
    // Element j of the resumed list is remaining[j % m] (padding repeats it from its start).
    const std::vector<size_t>& remaining = resume->remaining;
    const size_t m = remaining.size();
    num_samples_ = (m + replicas - 1) / replicas;
    indices_.resize(num_samples_);
    for (size_t p = 0; p < num_samples_; ++p) {
      indices_[p] = order[remaining[(rank + p * replicas) % m]];
    }
    num_real_samples_ = real_share(m, replicas, rank, num_samples_);
  }
  position_ = 0;
  resume_ = std::move(resume);
  MutexLock lock(shared_->mu);
  pass_ = ++shared_->pass;
  shared_->mask = resume_ != nullptr ? resume_->consumed
                                     : std::vector<uint8_t>(mask_bytes(real_positions()), 0);
}

std::vector<uint8_t> DistributedSampler::world_mask(size_t taken) const {
  const auto replicas = static_cast<size_t>(num_replicas_);
  std::vector<uint8_t> mask = resume_ != nullptr
                                  ? resume_->consumed
                                  : std::vector<uint8_t>(mask_bytes(real_positions()), 0);
  // Element j of the order is rank j % R's position j / R; past `count` it is padding.
  const size_t count = resume_ != nullptr ? resume_->remaining.size() : real_positions();
  const size_t end = std::min(count, std::min(taken, num_samples_) * replicas);
  for (size_t j = 0; j < end; ++j) set_bit(mask, resume_ != nullptr ? resume_->remaining[j] : j);
  return mask;
}

void DistributedSampler::set_world(int num_replicas, int rank) {
  TDIST_CHECK(num_replicas >= 1, InvalidArgument,
              "DistributedSampler::set_world: num_replicas=", num_replicas, " must be at least 1");
  TDIST_CHECK(rank >= 0 && rank < num_replicas, InvalidArgument,
              "DistributedSampler::set_world: invalid rank ", rank,
              ", rank should be in the interval [0, ", num_replicas - 1, "]");
  num_replicas_ = num_replicas;
  rank_ = rank;
  reset();
}

std::optional<size_t> DistributedSampler::global_position(size_t position) const {
  if (position >= num_real_samples_) return std::nullopt;
  const size_t j = static_cast<size_t>(rank_) + position * static_cast<size_t>(num_replicas_);
  return resume_ != nullptr ? resume_->remaining[j] : j;
}

::torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  const bool at_end = position_ >= indices_.size();
  const size_t begin = position_;
  const size_t end = std::min(indices_.size(), position_ + batch_size);
  position_ = end;
  {
    MutexLock lock(shared_->mu);
    if (pass_ == shared_->pass) {
      for (size_t p = begin; p < end; ++p) {
        if (auto g = global_position(p)) set_bit(shared_->mask, *g);
      }
    }
    // The resumed pass is over once a copy following it reaches its end.
    if (end == indices_.size() && resume_ != nullptr && shared_->resume == resume_) {
      shared_->resume = nullptr;
    }
  }
  if (at_end) return ::torch::nullopt;
  return std::vector<size_t>(indices_.begin() + static_cast<std::ptrdiff_t>(begin),
                             indices_.begin() + static_cast<std::ptrdiff_t>(end));
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
