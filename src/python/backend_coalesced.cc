// TdistBackend (backend.h): the coalesced calls, coalescing, and point-to-point.
#include <utility>

#include "backend.h"
#include "backend_calls.h"
#include "tdist/torch/collectives.h"

namespace tdist::python {

namespace tt = tdist::torch;
using ::c10d::OpType;

TdistBackend::WorkRef TdistBackend::allreduce_coalesced(
    Tensors& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  return TDIST_ISSUE(OpType::ALLREDUCE_COALESCED, tensors, {
    works.push_back(tt::all_reduce_coalesced_async(tensors, to_reduce_op(opts.reduceOp), group()));
  });
}

TdistBackend::WorkRef TdistBackend::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                        const ::c10d::AllgatherOptions& opts) {
  Tensors flat;
  for (const auto& list : outputs) flat.insert(flat.end(), list.begin(), list.end());
  return TDIST_ISSUE_IN(OpType::ALLGATHER_COALESCED, inputs, flat, {
    works.push_back(tt::all_gather_coalesced_async(outputs, inputs, group()));
  });
}

TdistBackend::WorkRef TdistBackend::send(Tensors& tensors, int dst, int tag) {
  return torch_errors([&] {
    return issue(
        OpType::SEND,
        {tt::isend(single(tensors, "send", "tensor"), dst, group(), static_cast<uint32_t>(tag))},
        {}, false, ::c10d::kUnsetTimeout, &tensors);
  });
}

TdistBackend::WorkRef TdistBackend::recv(Tensors& tensors, int src, int tag) {
  return torch_errors([&] {
    return issue(
        OpType::RECV,
        {tt::irecv(single(tensors, "recv", "tensor"), src, group(), static_cast<uint32_t>(tag))},
        tensors, false);
  });
}

TdistBackend::WorkRef TdistBackend::recvAnysource(Tensors& tensors, int tag) {
  return torch_errors([&] {
    return issue(
        OpType::RECVANYSOURCE,
        {tt::irecv_any(single(tensors, "recv", "tensor"), group(), static_cast<uint32_t>(tag))},
        tensors, false);
  });
}

#if TORCH_VERSION_MAJOR >= 2
TdistBackend::WorkRef TdistBackend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE_IN(OpType::ALLGATHER_INTO_TENSOR_COALESCED, inputs, outputs, {
    works.push_back(tt::all_gather_into_tensor_coalesced_async(outputs, inputs, group()));
  });
}

TdistBackend::WorkRef TdistBackend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE_IN(OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, outputs, {
    works.push_back(tt::reduce_scatter_tensor_coalesced_async(
        outputs, inputs, to_reduce_op(opts.reduceOp), group()));
  });
}

void TdistBackend::startCoalescing() {
  torch_errors([&] {
    MutexLock lock(coalescing_mu_);
    TDIST_CHECK(coalescing_ == nullptr, InvalidArgument,
                "startCoalescing: this group is coalescing already (endCoalescing first)");
    coalescing_ = std::make_unique<Coalescing>();
    coalescing_on_.store(true, std::memory_order_release);
    return 0;
  });
}

TdistBackend::WorkRef TdistBackend::endCoalescing() {
  return torch_errors([&] {
    std::unique_ptr<Coalescing> done;
    {
      MutexLock lock(coalescing_mu_);
      TDIST_CHECK(coalescing_ != nullptr, InvalidArgument,
                  "endCoalescing: this group is not coalescing (startCoalescing first)");
      done = std::move(coalescing_);
      coalescing_on_.store(false, std::memory_order_release);
    }
    // The calls in between were issued as they came (tdist's calls never block on their
    // peers); one Work covers them all.
    return c10::make_intrusive<TorchWork>(getRank(), OpType::COALESCED, std::move(done->works),
                                          std::move(done->outputs), progress_);
  });
}
#endif

void TdistBackend::coalesce(const std::vector<WorkPtr>& works,
                            const std::vector<at::Tensor>& outputs) {
  MutexLock lock(coalescing_mu_);
  if (coalescing_ == nullptr) return;
  coalescing_->works.insert(coalescing_->works.end(), works.begin(), works.end());
  coalescing_->outputs.insert(coalescing_->outputs.end(), outputs.begin(), outputs.end());
}

}  // namespace tdist::python
