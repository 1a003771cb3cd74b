// Reducer: the gradient reduction behind DistributedDataParallel (internal; ddp.h states
// what users see), after PyTorch's c10d Reducer.
//
// Parameters are grouped into buckets (flat tensors of one dtype; a bucket of one
// parameter is that parameter's gradient itself, attached at each pass). An autograd post
// hook on each parameter's gradient accumulator copies the fresh gradient into its shared
// bucket (or, with gradient_as_bucket_view, makes param.grad() that slice of the bucket)
// and, once a bucket is full, launches it through the comm hook - or, when communication
// is not to overlap backward, leaves every launch to the end of backward. Buckets launch
// in index order on every rank (a full bucket waits for the ones before it), so every rank
// issues the same collectives in the same order. The first hook of a pass queues a final
// autograd callback: the end of backward launches what is left, waits for every bucket
// (a waiting thread runs the queued operations of the built-in groups itself), checks the
// control vector (backward-pass counts, used parameters), lets the hook finish and writes
// the averaged gradients.
//
// Phases: idle (hooks ignored) -> armed by a synchronized forward -> reducing from the
// first hook to the final callback -> idle; a forward under no_sync arms a local pass
// whose first hook only counts it.
//
// Thread-safety: one mutex guards everything that is not const; hooks may fire on any
// thread. Comm hooks run with it held. Destruction waits for launched communication and removes the
// hooks.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm_stream.h"
#include "compat.h"
#include "ddp_sync.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"
#include "tdist/torch/comm_hooks.h"
#include "tdist/torch/ddp.h"
#include "tdist/work.h"

namespace tdist::torch {

// Gradients of at least this size get a bucket of their own, reduced in place: copying
// them into a bucket and back costs more than the extra collective.
constexpr size_t kOwnBucketBytes = size_t{256} << 10;

// Groups params[order[0]], params[order[1]], ... into buckets: a tensor of at least
// own_bytes alone, the others in one open bucket per dtype, closed once it holds >= its
// limit (first_bytes for a dtype's first bucket, cap_bytes after). Returns the buckets
// (indices into params) sorted by the position in `order` of their last member: the order
// in which they fill up.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order,
                                                const std::vector<::torch::Tensor>& params,
                                                size_t first_bytes, size_t cap_bytes,
                                                size_t own_bytes);

class Reducer {
 public:
  // `params`: the parameters to reduce (requires_grad), in module order.
  Reducer(std::vector<NamedTensor> params, std::shared_ptr<ProcessGroup> group,
          const DDPOptions& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a grad-mode forward: fails (once) if the previous synchronized backward did
  // not finish, and rebuilds the buckets when due (a collective).
  void prepare_for_forward() TDIST_EXCLUDES(mu_);
  // After a grad-mode forward: arms a synchronized pass (outputs: forward's tensors, for
  // the unused-parameter search) or a local one (under no_sync). average_over: the number
  // of ranks the default reduction averages over (a Join's ranks that still have inputs),
  // 0 for the group's size; a registered comm hook ignores it.
  void prepare_for_backward(const std::vector<::torch::Tensor>& outputs, int average_over = 0)
      TDIST_EXCLUDES(mu_);
  void prepare_for_local_backward() TDIST_EXCLUDES(mu_);
  // Whether prepare_for_backward needs the outputs (an unused-parameter search is due).
  bool needs_outputs() const TDIST_EXCLUDES(mu_);

  // A rank that ran out of inputs under a Join (reducer_join.cc): the collectives of one
  // synchronized backward pass of the others (the control vector with values that change
  // nothing, then every bucket through the comm hook on zeros), waited for. The pass
  // counts as one of this rank's. Communication failures propagate.
  void shadow_backward() TDIST_EXCLUDES(mu_);
  // Backward passes (all, synchronized) this rank counted; after a Join every rank takes
  // the highest counts, those of the ranks that ran every iteration.
  std::pair<uint64_t, uint64_t> pass_counts() const TDIST_EXCLUDES(mu_);
  void set_pass_counts(uint64_t backward_passes, uint64_t synced_passes) TDIST_EXCLUDES(mu_);

  void set_comm_hook(std::shared_ptr<CommHook> hook) TDIST_EXCLUDES(mu_);
  std::vector<std::vector<std::string>> bucket_assignment() const TDIST_EXCLUDES(mu_);
  bool buckets_rebuilt() const TDIST_EXCLUDES(mu_);
  CommOverlap comm_overlap() const {
    return during_backward_ ? CommOverlap::kDuringBackward : CommOverlap::kAfterBackward;
  }

 private:
  class GradHook;
  enum class Phase { kIdle, kArmedLocal, kArmed, kReducing };
  struct Param {
    std::string name;
    ::torch::Tensor tensor;
    compat::NodePtr grad_accumulator;
    uintptr_t hook_key = 0;
    size_t bucket = 0;  // buckets_[bucket].grad.gradients[slot] is its slice
    size_t slot = 0;
  };
  struct Bucket {
    std::vector<size_t> params;
    // One parameter: grad.buffer is its gradient itself during a pass (no copies), or
    // `staging` when that cannot be (no gradient on this rank, or a non-contiguous one).
    bool in_place = false;
    ::torch::Tensor staging;
    GradBucket grad;
    size_t pending = 0;  // parameters not ready yet in this pass
    WorkPtr work;        // of the pass in progress, once launched
    size_t bytes = 0;    // of its parameters (TDIST_TRACE's events)
  };

  void autograd_hook(size_t index) TDIST_EXCLUDES(mu_);
  // The end of backward (an autograd callback that start_reduction_locked queues).
  void finalize_backward() TDIST_EXCLUDES(mu_);
  // The rest run with mu_ held.
  void start_reduction_locked() TDIST_REQUIRES(mu_);
  void mark_ready_locked(size_t index) TDIST_REQUIRES(mu_);
  // Issues the control vector's all_reduce (before any bucket of the pass).
  void launch_control_locked() TDIST_REQUIRES(mu_);
  // Launches the full buckets from next_bucket_ on, in index order, up to the first that
  // is not full.
  void launch_full_buckets_locked() TDIST_REQUIRES(mu_);
  void copy_grad_to_bucket_locked(const Param& param, Bucket& bucket) TDIST_REQUIRES(mu_);
  void attach_in_place_locked(const Param& param, Bucket& bucket) TDIST_REQUIRES(mu_);
  // Drops the in-place buckets' references to this pass's gradients.
  void detach_in_place_locked() TDIST_REQUIRES(mu_);
  // Waits for the control vector and every launched bucket; returns the first error.
  std::exception_ptr wait_for_launched_locked() TDIST_REQUIRES(mu_);
  void write_gradients_locked() TDIST_REQUIRES(mu_);
  // The default reduction under a Join without divide_by_initial_world_size: turns the
  // buckets' average over the group into one over average_over_ ranks.
  void rescale_average_locked() TDIST_REQUIRES(mu_);
  bool globally_unused_locked(size_t index) const TDIST_REQUIRES(mu_);
  // Also called by the constructor, before any hook exists (constructors go unchecked).
  void build_buckets_locked(const std::vector<size_t>& order) TDIST_REQUIRES(mu_);
  void rebuild_buckets_locked() TDIST_REQUIRES(mu_);
  std::vector<size_t> search_unused_locked(const std::vector<::torch::Tensor>& outputs) const
      TDIST_REQUIRES(mu_);
  std::string describe_locked(const std::vector<size_t>& indices) const TDIST_REQUIRES(mu_);
  // TDIST_TRACE (diag/trace.h): bucket `b` became full / was launched (its Work then
  // ends the bucket's event).
  void trace_ready_locked(const Bucket& bucket) const TDIST_REQUIRES(mu_);
  void trace_launched_locked(Bucket& bucket) const TDIST_REQUIRES(mu_);

  const std::shared_ptr<ProcessGroup> group_;
  const DDPOptions options_;
  mutable Mutex mu_;  // guards every member below that is not const
  // The parameters' device (CPU or one CUDA device): buckets live there, and on a CUDA
  // device the buckets' collectives run on comm_stream_.
  const c10::Device device_;
  CommStream comm_stream_ TDIST_GUARDED_BY(mu_);
  // A group that takes device memory only (nccl): the control vector goes through
  // control_tensor_ on device_.
  const bool control_on_device_;
  ::torch::Tensor control_tensor_ TDIST_GUARDED_BY(mu_);
  const bool handle_unused_;    // find_unused_parameters or static_graph
  const bool during_backward_;  // options_.overlap resolved: launch buckets from the hooks
  std::vector<Param> params_ TDIST_GUARDED_BY(mu_);
  std::shared_ptr<CommHook> hook_ TDIST_GUARDED_BY(mu_);
  bool custom_hook_ TDIST_GUARDED_BY(mu_) = false;

  std::vector<Bucket> buckets_ TDIST_GUARDED_BY(mu_);
  Phase phase_ TDIST_GUARDED_BY(mu_) = Phase::kIdle;
  // Synchronized and local, that reached a hook.
  uint64_t backward_passes_ TDIST_GUARDED_BY(mu_) = 0;
  uint64_t synced_passes_ TDIST_GUARDED_BY(mu_) = 0;
  std::vector<char> ready_ TDIST_GUARDED_BY(mu_);  // per parameter, in the pass in progress
  size_t next_bucket_ TDIST_GUARDED_BY(mu_) = 0;   // the next bucket to launch
  // Parameters the search expects no gradient for; static_graph: found in the first pass.
  std::vector<size_t> unused_ TDIST_GUARDED_BY(mu_);
  bool unused_known_ TDIST_GUARDED_BY(mu_) = false;
  // [passes, -passes, used flags...], all_reduced with max at the start of each pass.
  std::vector<int64_t> control_ TDIST_GUARDED_BY(mu_);
  WorkPtr control_work_ TDIST_GUARDED_BY(mu_);
  std::vector<size_t> ready_order_ TDIST_GUARDED_BY(mu_);  // of the first synchronized pass
  bool rebuild_due_ TDIST_GUARDED_BY(mu_) = false;
  int average_over_ TDIST_GUARDED_BY(mu_) = 0;  // of the armed pass; 0: the group's size
  bool rebuilt_ TDIST_GUARDED_BY(mu_) = false;
  int trace_rank_ TDIST_GUARDED_BY(mu_) = -1;  // global rank, when TDIST_TRACE is set
  int trace_track_ TDIST_GUARDED_BY(mu_) = 0;  // "DDP buckets"
};

}  // namespace tdist::torch
