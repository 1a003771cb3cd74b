// TdistBackend: tdist as a torch.distributed backend. torch.distributed calls it for the
// CPU tensors of a group created with backend "tdist"; each call runs the matching tensor
// collective of tdist_torch (include/tdist/torch/collectives.h) on a tdist group and
// returns a TorchWork (torch_work.h). Internal to the Python extension (module.cc binds
// create_backend; python/tdist/__init__.py registers it).
//
// The tdist group is made by the tdist backend named `engine` ("auto", "tcp" or "shm")
// over the store torch.distributed hands the backend, so each torch group (the default
// one and every new_group) is its own tdist group. Tensors: CPU, any tdist dtype,
// contiguous or not, as tdist_torch takes them; a tensor on another device is a
// ValueError naming the device. Every call that takes a list of tensors per rank takes one
// entry, as torch.distributed's own functions pass. recv needs a source rank.
// Thread-safety: as a tdist ProcessGroup's; calls are ordered by their issue.
#pragma once

#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "python/progress_thread.h"
#include "tdist/process_group.h"

namespace tdist::python {

// The c10d class a backend derives from: c10d::Backend since LibTorch 2.0, before that
// the ProcessGroup itself (the one place the Python part differs between versions, with
// the LibTorch 1.13 store calls in store_adapter.cc).
#if TORCH_VERSION_MAJOR >= 2
using TorchBackendBase = ::c10d::Backend;
#else
using TorchBackendBase = ::c10d::ProcessGroup;
#endif

class TdistBackend final : public TorchBackendBase {
 public:
  TdistBackend(std::shared_ptr<tdist::ProcessGroup> group, std::string engine);
  ~TdistBackend() override;

  // Makes the tdist group of `engine` over `store` (the group's c10d store).
  static c10::intrusive_ptr<TdistBackend> create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout,
                                                 const std::string& engine);

  const std::string getBackendName() const override { return "tdist"; }
  // The tdist engine this group was made with ("auto", "tcp" or "shm").
  const std::string& engine() const { return engine_; }
  const std::shared_ptr<tdist::ProcessGroup>& group() const { return group_; }

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
#if TORCH_VERSION_MAJOR >= 2
  WorkRef allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const ::c10d::AllgatherOptions& opts) override;
  WorkRef reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const ::c10d::ReduceScatterOptions& opts) override;
  void abort() override { group_->abort(); }
  void shutdown() override {}
#endif

 private:
  std::shared_ptr<tdist::ProcessGroup> group_;
  std::string engine_;
  // Waits on the point-to-point Works whose futures were taken; stopped before group_ goes.
  const std::shared_ptr<ProgressThread> progress_ = std::make_shared<ProgressThread>();
};

}  // namespace tdist::python
