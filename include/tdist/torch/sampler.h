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
// Exactly-once resume (beyond PyTorch), on the same or another number of ranks: copies
// also share the progress of the epoch, so the sampler you kept knows what the loader's
// copy handed out. A checkpoint saves, with the epoch, the OR of every rank's
// consumed_mask() (a bitmap over the epoch's global positions: position g is element g of
// the epoch's order before padding; rank r's k-th index is position r + k * num_replicas);
// the resumed job calls resume(epoch, mask) on every rank before its loop:
//
//   std::vector<uint8_t> mask = sampler.consumed_mask();   // per rank; OR them (all_reduce)
//   ... after a restart on any number of ranks:
//   sampler.resume(saved_epoch, saved_mask);               // then the loop as above,
//   for (int64_t epoch = saved_epoch; ...) { sampler.set_epoch(epoch); ... }
//
// The rest of the epoch is then the positions not in the mask, in increasing position,
// dealt round robin over the new ranks and padded as PyTorch pads (num_real_samples() and
// is_padding() describe it), so each sample of the epoch is read once over both jobs (with
// drop_last: each sample the new world keeps, and each the old world read); the epochs
// after it are PyTorch's again. Saving during a resumed epoch and resuming again works the
// same way. The handed-out positions are those next() returned since the most recent
// reset() of any copy, by that copy (and copies made from it before they reset
// themselves): with several copies iterating, the one reset last wins. A loader with
// workers asks for batches ahead (2 * workers by default), so the mask counts batches
// handed to the loader, which may be more than the training loop has taken: save between
// epochs, or use workers(0) (which asks for each batch as the loop takes it) where a batch
// must be neither lost nor repeated. save()/load() describe one copy's position in its own
// order and know nothing of a resume; they restore a job on the same ranks only.
//
// Failures: InvalidArgument for num_replicas < 1 or a rank outside [0, num_replicas)
// (PyTorch's ValueError), and for a resume mask of the wrong size; tdist::Error when
// num_replicas or rank is left to the default group and none is initialized.
// Thread-safety: set_epoch, epoch, resume and consumed_mask may be called from any thread
// (set_epoch and resume rewind the copy they are called on, which must not be in use);
// everything else needs external synchronization per copy.
#pragma once

#include <torch/data/samplers/base.h>
#include <torch/types.h>

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

  // The epoch's positions this rank has been handed so far, through any copy of this
  // sampler (the data loader's copy included): a bitmap over the epoch's real positions
  // [0, real_positions()) of the epoch's global list (position g of PyTorch's list is the
  // g-th element of the shuffled order of the epoch, before padding; rank r's k-th index is
  // global position r + k * num_replicas in a fresh epoch), (real_positions() + 7) / 8
  // bytes. Bit g is (mask[g / 8] >> (g % 8)) & 1. Padding positions (>= the real count) are
  // never marked. "Handed out": what next() returned since the most recent reset() of any
  // copy (see above). During a resumed epoch: the positions consumed before the resume
  // plus those handed out since, in the original epoch's positions; with drop_last after a
  // resume from another world size the mask also keeps the positions past
  // real_positions() that the old world read (so it may be longer, up to
  // (dataset size + 7) / 8 bytes).
  std::vector<uint8_t> consumed_mask() const;
  // The number of real global positions of the current epoch: min(dataset_size, total_size)
  // (total_size = size() * num_replicas() of PyTorch's order; with drop_last the cut tail
  // is not real). Does not change with a resume.
  size_t real_positions() const;
  // Resumes epoch `epoch` after the positions in `consumed` (the OR of every old rank's
  // consumed_mask(), of the same size in bytes as consumed_mask() would be for that epoch;
  // with drop_last, whose real count depends on the world size, any size up to
  // (dataset size + 7) / 8 bytes, the mask of another world; InvalidArgument naming both
  // sizes otherwise; bits past the dataset are ignored): sets the epoch of this sampler and
  // all its copies, and from then on the epoch's order on every copy (at its next reset(),
  // and on this copy at once) is the remaining real positions in increasing global
  // position, dealt round robin over this sampler's num_replicas (rank r takes
  // remaining[r], remaining[r + R], ...), padded, as PyTorch pads, by repeating the
  // remaining list from its start so that every rank gets the same count (with drop_last
  // too: nothing more is cut); is_padding()/num_real_samples() describe that padding;
  // size() is the new per-rank count (0 when nothing remains).
  // The resumed order stays in force for epoch `epoch` (set_epoch(epoch) with the same
  // epoch, which a training loop calls at the start of every epoch, keeps it) until a copy
  // following it reaches its end (hands out its last index, or, with nothing to hand out,
  // returns nullopt from next()), set_epoch is called with another epoch, or a copy resets
  // to another dataset size; after that every epoch is PyTorch's order again.
  // consumed_mask() during a resumed epoch reports the positions consumed before the
  // resume plus those handed out since, in the original epoch's global positions, so that
  // saving and resuming again (on yet another world size) still sees every sample exactly
  // once.
  void resume(int64_t epoch, const std::vector<uint8_t>& consumed);

  // For an elastic job (torch/elastic.h), where every rank takes the same number of samples
  // per step: the mask consumed_mask() would give, OR'd over every rank, once each rank has
  // taken the first `taken` samples of its share of this copy's current order.
  std::vector<uint8_t> world_mask(size_t taken) const;
  // Makes this copy a sampler of a world of `num_replicas` where it is `rank` (after an
  // elastic job shrank); resume() next, with world_mask() of the old world, deals the rest
  // of the epoch over the new one. Other copies keep their world. InvalidArgument as the
  // constructor's.
  void set_world(int num_replicas, int rank);

  // Rewinds to the first position, in the order of the current epoch (the resumed order
  // while a resume is in force). new_size replaces the dataset size (and with it size() and
  // num_real_samples()). This copy becomes the one whose next() counts as handed out.
  void reset(::torch::optional<size_t> new_size = ::torch::nullopt) override;

  // The next up to batch_size indices; nullopt once all size() were handed out.
  ::torch::optional<std::vector<size_t>> next(size_t batch_size) override;

  // Saves the epoch, the position and the dataset size; load restores the first two
  // into a sampler constructed with the same arguments (InvalidArgument when the
  // dataset size differs or the position is past size()).
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  // This rank's indices for the current epoch, padding included (PyTorch's list(iter); in a
  // resumed epoch the resumed order).
  const std::vector<size_t>& indices() const { return indices_; }
  // Indices per rank and epoch (PyTorch's len(sampler); in a resumed epoch the resumed
  // count).
  size_t size() const { return num_samples_; }
  // Positions [0, num_real_samples()) hold real samples, the rest padding (see above).
  size_t num_real_samples() const { return num_real_samples_; }
  bool is_padding(size_t position) const { return position >= num_real_samples(); }

  // The dataset's size (PyTorch's len(dataset)).
  size_t dataset_size() const { return dataset_size_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  // Shared by all copies (sampler.cc): the epoch, the resume in force, the progress.
  struct Shared;
  // One resume: its epoch, mask and remaining positions (immutable once made).
  struct Resume;

  void set_size(size_t dataset_size);
  // The global position of this copy's index at `position`, or nullopt for padding.
  std::optional<size_t> global_position(size_t position) const;

  size_t dataset_size_ = 0;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  int64_t seed_;
  bool drop_last_;
  size_t num_samples_ = 0;
  size_t num_real_samples_ = 0;
  std::shared_ptr<Shared> shared_;
  // The resume this copy's order follows (null: PyTorch's order), and the number of the
  // reset that made the order (its next() counts while no copy has reset since).
  std::shared_ptr<const Resume> resume_;
  uint64_t pass_ = 0;
  std::vector<size_t> indices_;
  size_t position_ = 0;
};

}  // namespace tdist::torch
