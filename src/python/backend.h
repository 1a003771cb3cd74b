// TdistBackend: tdist as a torch.distributed backend. torch.distributed calls it for the
// CPU tensors of a group created with backend "tdist"; each call runs the matching tensor
// collective of tdist_torch (include/tdist/torch/collectives.h) on a tdist group and
// returns a TorchWork (torch_work.h). Internal to the Python extension (module.cc binds
// create_backend; python/tdist/__init__.py registers it).
//
// The tdist group is made by the tdist backend named `engine` ("auto", "tcp" or "shm")
// over the store torch.distributed hands the backend, so each torch group (the default
// one and every new_group) is its own tdist group; split_group's groups come from the
// parent's tdist group (ProcessGroup::split). Tensors: CPU, any tdist dtype, contiguous
// or not, as tdist_torch takes them; sparse COO tensors for all_reduce (sum); a tensor on
// another device is a ValueError naming the device. Calls that take a list of tensors per
// rank take one entry, as torch.distributed's own functions pass; the *_coalesced calls
// take many and run them as one operation of the group (backend_coalesced.cc).
//
// What c10d::Backend offers beyond the collectives (backend_group.cc): any-source receive
// (Work::sourceRank), coalescing (startCoalescing/endCoalescing: the collectives in between
// are issued as they come, the sends and receives kept and issued at endCoalescing as one
// batch_isend_irecv, as torch's batch_isend_irecv asks; endCoalescing's one Work covers
// them all, and each call's own Work finishes with its batch), split, setTimeout and
// per-call timeouts, monitoredBarrier, sequence numbers, collective timing, shutdown and
// abort.
//
// Fault tolerance (backend_elastic.cc; c10d headers with C10D_BACKEND_HAS_RECONFIGURE):
// shrink (torch.distributed.shrink_group) makes a new backend over ProcessGroup::shrink, the
// excluded ranks left out (SHRINK_ABORT aborts this group first). reconfigure (torch's
// _reconfigure) replaces this backend's tdist group by one of the peers whose handles
// (get_reconfigure_handle: unique per backend object) it is given, ranked by their place in
// the list (a set: in sorted order), met through the c10d store the backend was made with
// under a namespace of the uuid; so reconfiguring needs that store alive (tdistrun's agent
// or a FileStore hosts it). A backend made with enable_reconfigure has no group until its
// first reconfigure. The previous group is released, not aborted: abort() it first where it
// may still wait for a dead peer.
// Thread-safety: as a tdist ProcessGroup's; calls are ordered by their issue. Coalescing
// belongs to the thread that started it, as c10d's does. reconfigure, like shutdown, must
// not run while another thread calls the backend.
#pragma once

#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "python/progress_thread.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"
#include "tdist/torch/collectives.h"

namespace tdist::python {

// The c10d class a backend derives from: c10d::Backend since LibTorch 2.0, before that
// the ProcessGroup itself (the one place the Python part differs between versions, with
// the LibTorch 1.13 store calls in store_adapter.cc).
#if TORCH_VERSION_MAJOR >= 2
using TorchBackendBase = ::c10d::Backend;
#else
using TorchBackendBase = ::c10d::ProcessGroup;
#endif

// A new reconfigure handle: unique to the calling process and call (host, pid, a random
// number); backend_elastic.cc.
std::string new_reconfigure_handle();

// The Work of a send or receive kept for endCoalescing's batch (backend_coalesced.cc).
class BatchedWork;

// The Works and outputs of the calls made since startCoalescing, for endCoalescing's Work,
// and the sends and receives it issues as one batch.
struct Coalescing {
  std::vector<WorkPtr> works;
  std::vector<at::Tensor> outputs;
  std::vector<tdist::torch::P2POp> p2p;
  std::vector<std::shared_ptr<BatchedWork>> p2p_works;  // p2p[i]'s
};

class TdistBackend final : public TorchBackendBase {
 public:
  // Over `group`; `store`: the c10d store reconfigure() meets peers through (null: this
  // backend cannot reconfigure).
  TdistBackend(std::shared_ptr<tdist::ProcessGroup> group, std::string engine,
               c10::intrusive_ptr<::c10d::Store> store = {});
  // With no group until reconfigure() (torch's enable_reconfigure).
  TdistBackend(int rank, int size, std::chrono::milliseconds timeout, std::string engine,
               c10::intrusive_ptr<::c10d::Store> store);
  ~TdistBackend() override;

  // Makes the tdist group of `engine` over `store` (the group's c10d store); with
  // `defer_group` (enable_reconfigure), no group until reconfigure().
  static c10::intrusive_ptr<TdistBackend> create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout,
                                                 const std::string& engine,
                                                 bool defer_group = false);

  const std::string getBackendName() const override { return "tdist"; }
  // The tdist engine this group was made with ("auto", "tcp" or "shm").
  const std::string& engine() const { return engine_; }
  // The tdist group; InvalidArgument once shutdown() released it, or before the first
  // reconfigure() of a backend made without one.
  const std::shared_ptr<tdist::ProcessGroup>& group() const;

  using Tensors = std::vector<at::Tensor>;
  using TensorLists = std::vector<std::vector<at::Tensor>>;
  using WorkRef = c10::intrusive_ptr<::c10d::Work>;

  WorkRef broadcast(Tensors& tensors, const ::c10d::BroadcastOptions& opts) override;
  WorkRef allreduce(Tensors& tensors, const ::c10d::AllreduceOptions& opts) override;
  WorkRef allreduce_coalesced(Tensors& tensors,
                              const ::c10d::AllreduceCoalescedOptions& opts) override;
  WorkRef reduce(Tensors& tensors, const ::c10d::ReduceOptions& opts) override;
  WorkRef allgather(TensorLists& outputs, Tensors& inputs,
                    const ::c10d::AllgatherOptions& opts) override;
  WorkRef _allgather_base(at::Tensor& output, at::Tensor& input,
                          const ::c10d::AllgatherOptions& opts) override;
  WorkRef allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                              const ::c10d::AllgatherOptions& opts) override;
  WorkRef gather(TensorLists& outputs, Tensors& inputs, const ::c10d::GatherOptions& opts) override;
  WorkRef scatter(Tensors& outputs, TensorLists& inputs,
                  const ::c10d::ScatterOptions& opts) override;
  WorkRef reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const ::c10d::ReduceScatterOptions& opts) override;
  WorkRef _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const ::c10d::ReduceScatterOptions& opts) override;
  WorkRef alltoall_base(at::Tensor& output, at::Tensor& input,
                        std::vector<int64_t>& output_split_sizes,
                        std::vector<int64_t>& input_split_sizes,
                        const ::c10d::AllToAllOptions& opts) override;
  WorkRef alltoall(Tensors& outputs, Tensors& inputs, const ::c10d::AllToAllOptions& opts) override;
  WorkRef send(Tensors& tensors, int dst, int tag) override;
  WorkRef recv(Tensors& tensors, int src, int tag) override;
  WorkRef recvAnysource(Tensors& tensors, int tag) override;
  WorkRef barrier(const ::c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  uint64_t getSequenceNumberForGroup() override;
  void setSequenceNumberForGroup() override {}  // tdist's numbers start at 0 on every rank
#if TORCH_VERSION_MAJOR >= 2
  WorkRef allreduce_sparse(Tensors& tensors, const ::c10d::AllreduceOptions& opts) override;
  WorkRef allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const ::c10d::AllgatherOptions& opts) override;
  WorkRef reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const ::c10d::ReduceScatterOptions& opts) override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  WorkRef endCoalescing() override;
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<::c10d::Backend> split(const c10::intrusive_ptr<::c10d::Store>& store,
                                            const std::vector<int>& ranks,
                                            const c10::intrusive_ptr<Options>& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void enableCollectivesTiming() override { timing_ = true; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void abort() override;
  void shutdown() override;
#endif
#ifdef C10D_BACKEND_HAS_RECONFIGURE  // c10d's shrink came before reconfigure
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<::c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                             int shrink_flags,
                                             const c10::intrusive_ptr<Options>& opts) override;
  bool supportsReconfigure() const override { return store_ != nullptr; }
  ::c10d::ReconfigureHandle get_reconfigure_handle() const override { return handle_; }
  WorkRef reconfigure(const ::c10d::ReconfigureOptions& opts) override;
#endif

  // The deadline of a wait that the call's options bound: theirs when set, else the
  // group's timeout (setTimeout) as it is now.
  std::chrono::milliseconds timeout_of(std::chrono::milliseconds option) const;

 private:
  // Wraps the tdist Works of one call as torch's Work (run now when the caller waits).
  // `inputs`: the tensors the profiler's event shows (the outputs when null).
  WorkRef issue(::c10d::OpType type, std::vector<WorkPtr> works, std::vector<at::Tensor> outputs,
                bool run_now, std::chrono::milliseconds timeout = ::c10d::kUnsetTimeout,
                const std::vector<at::Tensor>* inputs = nullptr);
  // A call that finished inside its tensor call (finishes_in_call) and whose caller
  // needs no Work: its errors raised here, and no Work returned (null), as torch's NCCL
  // does for async_op=False; torch.distributed's functions then skip work.wait().
  WorkRef finished(::c10d::OpType type, const std::vector<WorkPtr>& works);
  // Counts a collective call (the group's sequence number).
  void count(::c10d::OpType type);
  WorkRef sparse_allreduce(Tensors& tensors, const ::c10d::AllreduceOptions& opts);
  // Whether a call that the caller waits for at once (`run_now`) may finish inside its
  // tensor call (tdist::torch::CallerWaits): not while coalescing (the calls are waited
  // for together), timing or profiling (the Work's clock and event start before the
  // operation), nor with a timeout of its own or the backend's (a wait that ends early
  // leaves the operation running).
  bool finishes_in_call(bool run_now, std::chrono::milliseconds timeout) const;
  // While coalescing: keeps `op` for endCoalescing's batch and returns its Work; else null.
  WorkPtr defer(tdist::torch::P2POp op) TDIST_EXCLUDES(coalescing_mu_);
  // Adds a call's Works to endCoalescing's, when coalescing.
  void coalesce(const std::vector<WorkPtr>& works, const std::vector<at::Tensor>& outputs)
      TDIST_EXCLUDES(coalescing_mu_);

  std::shared_ptr<tdist::ProcessGroup> group_;
  std::string engine_;
  // reconfigure's: the c10d store peers meet through, this backend's handle, the timeout of a
  // backend that has no group yet, the uuids used so far, and shrinks made (store namespaces).
  c10::intrusive_ptr<::c10d::Store> store_;
  const std::string handle_;
  std::chrono::milliseconds deferred_timeout_{0};
  std::vector<int64_t> uuids_;
  uint64_t shrinks_ = 0;
  std::atomic<int64_t> timeout_ms_{-1};     // setTimeout's, for waits; -1: the group's own
  std::atomic<bool> timing_{false};         // enableCollectivesTiming
  std::atomic<uint64_t> collectives_{0};    // issued so far: the group's sequence number
  std::atomic<bool> coalescing_on_{false};  // coalescing_ is set (checked without the lock)
  Mutex coalescing_mu_;
  std::unique_ptr<Coalescing> coalescing_ TDIST_GUARDED_BY(coalescing_mu_);
  // Waits on the point-to-point Works whose futures were taken; stopped before group_ goes
  // (reconfigure starts another for the new group).
  std::shared_ptr<ProgressThread> progress_ = std::make_shared<ProgressThread>();
};

}  // namespace tdist::python
