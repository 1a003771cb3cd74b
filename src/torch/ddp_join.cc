// DistributedDataParallel as a Joinable (tdist/torch/join.h): what a forward adds under a
// Join, the joined ranks' shadow of an iteration, and the final sync of the model.
//
// One iteration, on a rank that still has inputs (pre_forward) and on a joined one
// (shadow_iteration), issues in this order:
//   the Join's count (all_reduce sum: 1 here, 0 there; the first Joinable's)
//   the iteration's step (all_reduce max of [rank, synchronized backward?, grad mode?];
//     skipped while the count says that no rank has joined, when DDP is the first Joinable)
//   the bucket rebuild when due and in grad mode (broadcast of rank 0's order)
//   the buffers' broadcast, from the highest rank that still has inputs
//   the synchronized backward's control vector and buckets (Reducer::shadow_backward)
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "ddp_sync.h"
#include "reducer.h"
#include "tdist/error.h"
#include "tdist/torch/ddp.h"

namespace tdist::torch {

class DistributedDataParallelBase::DdpJoinHook final : public JoinHook {
 public:
  explicit DdpJoinHook(DistributedDataParallelBase& ddp) : ddp_(ddp) {}
  void main_hook() override { ddp_.shadow_iteration(); }
  void post_hook(bool is_last_joiner) override { ddp_.sync_final_model(is_last_joiner); }

 private:
  DistributedDataParallelBase& ddp_;
};

std::unique_ptr<JoinHook> DistributedDataParallelBase::join_hook(const JoinOptions& /*options*/) {
  // The options are read from join_context() at each forward.
  return std::make_unique<DdpJoinHook>(*this);
}

int DistributedDataParallelBase::join_forward_step(bool grad_mode) {
  const int world = group_->size();
  const std::optional<int> with_inputs = notify_join_context();
  if (with_inputs.has_value() && !join_context()->options().divide_by_initial_world_size) {
    average_over_ = *with_inputs;  // as PyTorch, only from the Join's first Joinable
  }
  // Nobody has joined, so nobody shadows this iteration; the buffers come from the last rank.
  if (with_inputs.has_value() && *with_inputs == world) return world - 1;
  std::vector<int64_t> step = {group_->rank(), grad_mode && require_sync_ ? 1 : 0,
                               grad_mode ? 1 : 0};
  try {
    all_reduce_values(*group_, step, ReduceOpKind::kMax, device_);
  } catch (const Error&) {
    rethrow_with_context(
        std::current_exception(),
        ::tdist::detail::str_cat("DDP forward under a Join (rank ", group_->rank(),
                                 "): telling the ranks that ran out of inputs what this "
                                 "iteration runs failed; most likely a rank failed, or left "
                                 "its Join by an exception: "));
  }
  return static_cast<int>(step[0]);
}

void DistributedDataParallelBase::shadow_iteration() {
  try {
    std::vector<int64_t> step = {-1, 0, 0};
    all_reduce_values(*group_, step, ReduceOpKind::kMax, device_);
    TDIST_CHECK(step[0] >= 0 && step[0] < group_->size(), DesyncError,
                "no rank says it still has inputs, yet the Join's count said some do (do all "
                "ranks make their Join over the same Joinables, in the same order?)");
    if (step[2] != 0) reducer_->prepare_for_forward();
    if (options_.broadcast_buffers) {
      broadcast_coalesced(*group_, buffers_, static_cast<int>(step[0]));
    }
    if (step[1] != 0) reducer_->shadow_backward();
  } catch (const Error& e) {
    if (!is_communication_error(e)) throw;
    rethrow_with_context(
        std::current_exception(),
        ::tdist::detail::str_cat("DDP under a Join (rank ", group_->rank(),
                                 ", out of inputs): shadowing an iteration of the ranks that "
                                 "still have inputs failed; most likely one of them failed, or "
                                 "left its Join by an exception: "));
  }
}

void DistributedDataParallelBase::sync_final_model(bool is_last_joiner) {
  try {
    const auto [passes, synced] = reducer_->pass_counts();
    std::vector<int64_t> last = {is_last_joiner ? group_->rank() : -1, static_cast<int64_t>(passes),
                                 static_cast<int64_t>(synced)};
    all_reduce_values(*group_, last, ReduceOpKind::kMax, device_);
    TDIST_CHECK(last[0] >= 0 && last[0] < group_->size(), DesyncError,
                "no rank says it joined last (do all ranks make their Join over the same "
                "Joinables, in the same order?)");
    reducer_->set_pass_counts(static_cast<uint64_t>(last[1]), static_cast<uint64_t>(last[2]));
    broadcast_coalesced(*group_, state_, static_cast<int>(last[0]));
  } catch (const Error& e) {
    if (!is_communication_error(e)) throw;
    rethrow_with_context(std::current_exception(),
                         ::tdist::detail::str_cat("DDP under a Join (rank ", group_->rank(),
                                                  "): copying the final model from the last "
                                                  "rank to join failed: "));
  }
}

}  // namespace tdist::torch
