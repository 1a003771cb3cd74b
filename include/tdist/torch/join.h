// Join: training on uneven inputs, as torch.distributed.algorithms.Join. Ranks whose data
// ran out keep matching ("shadowing") the collectives that the ranks still training issue,
// until every rank has run out; then the final model is made the same on every rank.
//
//   tdist::torch::DistributedDataParallel ddp(net);
//   ::torch::optim::SGD opt(net->parameters(), 0.1);
//   {
//     tdist::torch::Join join(ddp);              // options: see JoinOptions
//     for (auto& batch : my_uneven_batches) {    // as many as this rank has, 0 included
//       opt.zero_grad();
//       ::torch::mse_loss(ddp.forward(batch.x), batch.y).backward();
//       opt.step();
//     }
//   }  // shadows the others' iterations until every rank is done, then syncs the model
//
// Protocol (PyTorch's): every iteration of a rank that still has inputs starts with a small
// all_reduce that counts the ranks still having inputs (the first Joinable calls
// notify_join_context(); DDP does it at the start of forward). A rank that ran out enters
// finish() (or the destructor): it answers that all_reduce with 0 and, while the count is
// not 0, runs every Joinable's JoinHook::main_hook(), which issues what one iteration of
// that Joinable issues on the other ranks. Once the count is 0, every rank runs each
// post_hook(is_last_joiner): is_last_joiner is true on the ranks that ran out in the last
// iteration (they ran every iteration: every rank when inputs were even).
//
// DistributedDataParallel (ddp.h) is a Joinable. Under an enabled Join:
//  - A joined rank takes part in each of the others' forwards (buffer broadcast, bucket
//    rebuild) and synchronized backward passes with zero gradients: the same collectives
//    (the control vector, then each bucket through the comm hook, on zero-filled copies
//    of the buckets), so the others reduce their gradients with nobody else's added in.
//    Passes under no_sync or without grad mode are local on the others, and the joined
//    ranks then shadow no backward.
//  - The gradient average: with divide_by_initial_world_size (the default) the sum over the
//    ranks still training divided by the group's size (joined ranks count as zero
//    gradients: every sample weighs the same); without it, divided by the number of ranks
//    still training (as if the group were that small). As in PyTorch, only the default
//    reduction follows this option: a registered comm hook (also allreduce_hook()) does
//    what it does, on zeros for the joined ranks, and divides by the group's size.
//  - Buffers (broadcast_buffers) are broadcast from the highest rank that still has inputs
//    instead of rank 0 (rank 0 may have joined; PyTorch does the same under Join, so while
//    every rank has inputs the buffers come from rank size() - 1).
//  - post_hook: the parameters and buffers of the highest rank among the last joiners are
//    copied to every rank (so every rank ends with the model that saw every batch), and
//    DDP's count of backward passes is made equal again, so the DDP can train on (another
//    epoch, a second Join) afterwards. Gradients and optimizer state are left as they are:
//    those of ranks that joined early are stale (an optimizer with state, such as momentum,
//    differs between ranks after an uneven epoch, in PyTorch too).
//  - Cost: each forward adds one all_reduce of one value (the count) and, once some rank
//    has joined (always, when the DDP is not the Join's first Joinable), one of three
//    values that tells the joined ranks what this iteration runs (grad mode, no_sync);
//    the joined ranks issue the same per iteration of the others. A joined rank logs a
//    warning once it has shadowed 1000 iterations (so large a skew costs time).
//
// Options:
//  - enable = false: the Join does nothing at all (DDP behaves as without one); for
//    inputs known to be even.
//  - throw_on_early_termination: no shadowing. In the first iteration in which some rank
//    has run out, every rank throws Error: the ranks still training from the forward that
//    starts that iteration ("N of W ranks have run out of inputs"), and the ranks that ran
//    out, from finish() (or the destructor). Use it when the loop issues collectives that no
//    Joinable shadows (your own all_reduce of a metric, SyncBatchNorm): nothing is
//    shadowed then, and every rank stops in the same iteration, with the group still in
//    step.
//  - divide_by_initial_world_size: above.
//
// Requirements: every rank constructs its Join over the same Joinables in the same order
// (an InvalidArgument for none, for Joinables of different groups, or for a Joinable in
// two Joins at once). In the loop, every forward in grad mode outside no_sync is followed
// by its backward (a joined rank shadows that backward), and other collectives need a
// Joinable of their own or throw_on_early_termination. The Joinables should outlive the
// Join (one destroyed earlier leaves it, and its hook goes with it).
//
// Leaving the scope: normally, ~Join() runs finish(). Leaving it by an exception (any
// exception thrown since the Join was made and not caught before its end) runs nothing:
// the other ranks then wait in vain, and get TimeoutError (PeerError if this process dies)
// within the group's timeout from their next collective (DDP's forward or backward, or the
// Join's own all_reduce), with a message naming the likely cause. Errors of finish() (the
// early-termination Error, TimeoutError, PeerError, DesyncError of the shadowed
// collectives) propagate: from finish(), or from the destructor, which is therefore
// noexcept(false), as std::experimental::scope_success is. Call finish() explicitly where
// a destructor must not throw (a Join held in a container, in a smart pointer or as a
// member); after finish() (successful or not) the destructor does nothing.
//
// Thread-safety: a Join and its Joinables are used by one thread at a time (the training
// loop's).
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tdist/process_group.h"

namespace tdist::torch {

struct JoinOptions {
  bool enable = true;
  bool throw_on_early_termination = false;
  // DDP: average the gradients over the group's size (true) or over the ranks that still
  // have inputs (false). See the file comment.
  bool divide_by_initial_world_size = true;
};

class Join;

// What a Joinable does on a rank that has run out of inputs.
class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // Called once per iteration of the ranks that still have inputs: issues the collectives
  // that one iteration of the Joinable issues there (one forward, backward and optimizer
  // step), in the same order. May throw; finish() then fails with that error.
  virtual void main_hook() {}
  // Called once every rank has run out: true on the ranks that ran out in the last
  // iteration. The place to make the final state the same on every rank.
  virtual void post_hook(bool /*is_last_joiner*/) {}
};

// Something whose per-iteration collectives a Join shadows: DistributedDataParallel, or a
// class of yours (e.g. one that all_reduces a metric each iteration).
class Joinable {
 public:
  virtual ~Joinable();
  Joinable(const Joinable&) = delete;
  Joinable& operator=(const Joinable&) = delete;

  // The hook that shadows this Joinable; called once when a Join is made over it.
  virtual std::unique_ptr<JoinHook> join_hook(const JoinOptions& options) = 0;
  // The group of this Joinable's collectives; the Join's own all_reduce goes through the
  // first Joinable's group (every Joinable of a Join must have the same one).
  virtual std::shared_ptr<ProcessGroup> join_process_group() const = 0;
  // Where the Join's own all_reduce puts its tensor when the group takes device memory
  // only (nccl); host memory otherwise.
  virtual c10::Device join_device() const = 0;

 protected:
  Joinable() = default;
  // Call at the start of every iteration, before this Joinable's collectives of that
  // iteration. For the first Joinable of an enabled Join it runs the Join's all_reduce
  // and returns how many ranks still have inputs (this one included); with
  // throw_on_early_termination it throws Error when that is fewer than the group's size.
  // Otherwise (not the first, no Join, a disabled one) it returns nullopt at once.
  // Communication failures propagate (TimeoutError, PeerError, DesyncError).
  std::optional<int> notify_join_context();
  // The enabled Join this Joinable is in now, or nullptr.
  const Join* join_context() const { return join_; }

 private:
  friend class Join;
  Join* join_ = nullptr;
  bool first_ = false;
};

// The scope of a training loop on uneven inputs; see the file comment.
class [[nodiscard]] Join {
 public:
  // Hooks are iterated in the order given. InvalidArgument: no Joinable, Joinables of
  // different groups, or one already in another Join.
  explicit Join(Joinable& joinable, JoinOptions options = {});
  explicit Join(const std::vector<std::reference_wrapper<Joinable>>& joinables,
                JoinOptions options = {});
  // Runs finish() unless it ran, or unless an exception is leaving the scope.
  ~Join() noexcept(false);
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has run out of inputs: shadows the others' iterations until every rank has
  // run out, then runs the post hooks. Collective. Once: later calls return at once. The
  // Joinables leave the Join when it returns or throws.
  void finish();

  const JoinOptions& options() const { return options_; }

 private:
  friend class Joinable;
  struct Entry {
    Joinable* joinable;  // null once it was destroyed
    std::unique_ptr<JoinHook> hook;
  };
  // The first Joinable's per-iteration all_reduce (see Joinable::notify_join_context).
  int notify();
  // The all_reduce (sum) of `mine` over the group: the number of ranks still having inputs.
  int64_t count_ranks_with_inputs(int64_t mine);
  void forget(const Joinable& joinable);
  void leave();

  const JoinOptions options_;
  std::vector<Entry> entries_;
  std::shared_ptr<ProcessGroup> group_;
  c10::Device device_{c10::kCPU};
  const int uncaught_at_start_;
  bool finished_ = false;
  uint64_t iterations_ = 0;  // this rank's notified iterations, for messages
};

}  // namespace tdist::torch
