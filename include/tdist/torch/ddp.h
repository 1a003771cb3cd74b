// DistributedDataParallel for LibTorch modules: data-parallel training where every rank
// holds a replica of the model and backward leaves the gradients averaged over ranks.
//
//   tdist::init_process_group("tcp");
//   auto net = std::make_shared<Net>();               // or a ModuleHolder (nn::Sequential)
//   tdist::torch::DistributedDataParallel ddp(net);   // broadcasts rank 0's parameters
//   ::torch::optim::SGD opt(ddp.module()->parameters(), 0.1);
//   for (auto& batch : *loader) {
//     opt.zero_grad();
//     auto loss = ::torch::nll_loss(ddp.forward(batch.data), batch.target);
//     loss.backward();                                 // grads are averaged when it returns
//     opt.step();
//   }
//
// Devices: the module's parameters and buffers are on the CPU or on one CUDA device (move
// the module there first, e.g. to tdist::torch::local_device(); a group that takes device
// memory only, `nccl`, needs CUDA). On a CUDA device the buckets live there; a full bucket
// records an event on the current stream, a side stream waits for it and runs the bucket's
// all_reduce (or comm hook: all three built-in hooks work on CUDA buckets) through the
// tensor collectives (device pointers for nccl, pinned-memory staging for the host
// backends), and the end of backward makes the current stream wait for the side stream, so
// the optimizer sees the averaged gradients.
//
// Construction (collective: every rank constructs its DDP in the same order) checks that
// every rank has the same parameter and buffer shapes and dtypes (InvalidArgument listing
// the first differences by name, raised on every rank), then copies rank 0's parameters
// and buffers to all ranks.
//
// forward(args...) calls module->forward(args...). It first copies rank 0's buffers to the
// other ranks (broadcast_buffers; so forward is collective: call it on every rank, and use
// module() directly for work only some ranks do), and when grad mode is on it arms the
// reduction of the following backward pass:
//  - Parameters (those with requires_grad) are grouped into buckets of one dtype: in
//    reverse order of parameters(), a parameter of 256 KiB or more alone, the others
//    together, the first such bucket closed at first_bucket_mb, later ones at
//    bucket_cap_mb (a bucket closes once it reaches the limit); buckets are numbered in
//    the order they fill up. After the first iteration the buckets are rebuilt once, in
//    the order gradients actually became ready on rank 0 (not with
//    find_unused_parameters unless static_graph).
//  - A bucket of one parameter is reduced in the parameter's gradient itself: no copy,
//    and param.grad() stays the tensor autograd made (only where this rank has no
//    gradient, or a non-contiguous one, does it go through a tensor of DDP's). Backward
//    hooks copy the other gradients into their shared buckets (with
//    gradient_as_bucket_view the parameter's grad IS its slice of the bucket: no copies).
//  - Each bucket's all_reduce (or comm hook) starts, as `overlap` says, as soon as the
//    bucket is full while backward goes on, or once backward has computed every
//    gradient, on the backward thread (by default where the ranks use every core).
//  - The end of backward waits for every bucket and writes the averaged gradients into
//    param.grad(); optimizer.step() needs nothing more.
//  - Each synchronized pass also all_reduces a small control vector: every rank's count
//    of backward passes through this DDP (synchronized and under no_sync) and, when
//    unused parameters are searched, which parameters each rank used.
// With find_unused_parameters, forward's output is searched (Tensor, std::vector, std::tuple
// and std::pair, nested) and the autograd graph from it is walked to find parameters that
// will get no gradient; they count as ready with zero gradient. A parameter no rank used
// keeps its grad untouched. static_graph does the search in the first iteration only and
// reuses its answer.
//
// no_sync() returns a guard: forwards while it lives arm no reduction, and their backward
// passes accumulate gradients locally. The next synchronized backward reduces the sum.
//
// Uneven inputs: the DDP is a Joinable (join.h). Inside a tdist::torch::Join scope, ranks
// that ran out of batches shadow the others' forwards and backward passes with zero
// gradients until every rank is done, and the model of the last rank to finish is then
// copied to all (PyTorch's `with ddp.join():`); without one, every rank must run the same
// number of iterations.
//
// Errors (all raised by the call named, on the rank that detects them):
//  - a parameter that gets no gradient in a synchronized pass without find_unused_parameters:
//    Error at the END OF THAT BACKWARD (from loss.backward()), naming the parameters by
//    their full path ("fc2.weight");
//  - a parameter that gets a gradient twice in one pass (a second backward before the first
//    finished: reentrant or concurrent): Error from that backward, naming it;
//  - ranks that ran different numbers of backward passes: when they meet in a synchronized
//    pass, DesyncError from backward on every rank ("ranks ran different numbers of
//    backward passes", with the counts). A rank whose peers stopped earlier finds nobody
//    to reduce with: it waits until the group's timeout, and TimeoutError, PeerError or
//    DesyncError then ends that backward (or forward, whose buffer broadcast and bucket
//    rebuild are collectives too) with that explanation added;
//  - forward after a backward that failed midway: Error (the next forward works again);
//  - non-CPU, sparse or complex parameters: InvalidArgument at construction.
//
// Thread-safety: one thread at a time may call forward, no_sync and register_comm_hook;
// backward may run on any thread. The DDP must outlive the backward passes of its
// forwards, and must be destroyed on every rank (destruction waits for communication it
// started).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tdist/error.h"
#include "tdist/process_group.h"
#include "tdist/torch/comm_hooks.h"
#include "tdist/torch/forward_outputs.h"
#include "tdist/torch/join.h"

namespace tdist::torch {

class Reducer;

// When DDP starts each bucket's all_reduce (or comm hook).
enum class CommOverlap {
  // kDuringBackward where every local rank has a core to spare for communication beside
  // its intra-op threads (usable cores >= local ranks x (torch::get_num_threads() + 1),
  // local ranks as the launcher tells: LOCAL_WORLD_SIZE and the like), else kAfterBackward.
  kAuto,
  // As soon as the bucket is full, while backward goes on (PyTorch's way): the process
  // group's worker thread runs the communication beside backward.
  kDuringBackward,
  // When backward has computed every gradient, run by the backward thread itself. Where
  // the ranks use every core, a worker thread could only take turns with backward on its
  // core: here nothing competes with backward, and the waits poll instead of sleeping.
  kAfterBackward,
};

struct DDPOptions {
  double bucket_cap_mb = 25;   // MiB, as PyTorch
  double first_bucket_mb = 1;  // MiB; small, so that communication starts early
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  // Gradients of shared buckets are slices of them: no copy into the bucket and back, no
  // second copy of those gradients in memory. Large gradients are reduced in place either
  // way, so it saves little but for models of many small parameters. Off by default, as
  // in PyTorch: gradients then share memory with each other and with DDP, and one kept
  // past zero_grad (set to none) is overwritten by later passes.
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  CommOverlap overlap = CommOverlap::kAuto;
  std::shared_ptr<ProcessGroup> process_group;  // nullptr: tdist::get_default_group()
  // The commit vote of an elastic job (tdist/elastic.h), at the end of each synchronized
  // backward pass: once this rank has every bucket reduced, one all_reduce of one int.
  // When backward returns, every rank holds the step's complete reduction and may apply it;
  // when it raises (a rank died or hung), the step is complete on some ranks at most, and
  // elastic::recover brings the others to them. Costs one small collective per step.
  bool commit_vote = false;
};

// The part of DistributedDataParallel that does not depend on the module type.
class DistributedDataParallelBase : public Joinable {
 public:
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  // While it lives, forwards arm no gradient reduction (gradient accumulation).
  class [[nodiscard]] NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class DistributedDataParallelBase;
    explicit NoSyncGuard(DistributedDataParallelBase& owner);
    DistributedDataParallelBase& owner_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces the default all_reduce with `hook`. Only before the first synchronized
  // backward pass, and once (Error otherwise).
  void register_comm_hook(std::shared_ptr<CommHook> hook);

  // Read-only view of the buckets, in launch order: the parameter names of each.
  std::vector<std::vector<std::string>> bucket_assignment() const;
  // True once the buckets were rebuilt from the observed gradient order.
  bool buckets_rebuilt() const;
  // When buckets are launched: options().overlap, kAuto resolved (never kAuto).
  CommOverlap comm_overlap() const;

  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  const DDPOptions& options() const { return options_; }

  // Joinable (join.h): the hook that shadows this DDP's forwards and backward passes on a
  // rank that ran out of inputs, and syncs the final model.
  std::unique_ptr<JoinHook> join_hook(const JoinOptions& options) override;
  std::shared_ptr<ProcessGroup> join_process_group() const override { return group_; }
  c10::Device join_device() const override { return device_; }

 protected:
  // Collective (see the file comment). Keeps references to the module's tensors.
  DistributedDataParallelBase(::torch::nn::Module& module, DDPOptions options);
  ~DistributedDataParallelBase();

  // Around the wrapped forward: pre_forward syncs buffers and rebuilds buckets when due;
  // post_forward arms the following backward. wants_outputs() says whether post_forward
  // needs forward's output tensors (to search for unused parameters).
  void pre_forward();
  bool wants_outputs() const;
  void post_forward(const std::vector<::torch::Tensor>& outputs);

 private:
  class DdpJoinHook;  // ddp_join.cc

  // Under a Join, at the start of forward (a rank that still has inputs): the Join's count
  // and, when some rank may have joined, telling the joined ranks what this iteration
  // runs. Returns the rank whose buffers the forward broadcasts.
  int join_forward_step(bool grad_mode);
  // A joined rank: one iteration of the others (DdpJoinHook::main_hook).
  void shadow_iteration();
  // Every rank, once all have joined (DdpJoinHook::post_hook).
  void sync_final_model(bool is_last_joiner);

  DDPOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  c10::Device device_{c10::kCPU};       // the parameters' (CPU for a module without any)
  std::vector<::torch::Tensor> state_;  // every parameter, then every buffer
  std::vector<::torch::Tensor> buffers_;
  std::unique_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  int average_over_ = 0;  // under a Join: ranks the next synchronized pass averages over
};

// ModuleHandle: std::shared_ptr<M> for a torch::nn::Module subclass M, or a ModuleHolder
// such as torch::nn::Sequential; deduced from the constructor argument.
template <typename ModuleHandle>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  explicit DistributedDataParallel(ModuleHandle module, DDPOptions options = {})
      : DistributedDataParallelBase(detail::module_of(module, "DistributedDataParallel"),
                                    std::move(options)),
        module_(std::move(module)) {}

  // module->forward(args...), with the synchronization described above.
  template <typename... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto output = module_->forward(std::forward<Args>(args)...);
    std::vector<::torch::Tensor> tensors;
    if (wants_outputs()) detail::collect_tensors(output, tensors);
    post_forward(tensors);
    return output;
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  const ModuleHandle& module() const { return module_; }

 private:
  ModuleHandle module_;
};

}  // namespace tdist::torch
