// TdistBackend (backend.h): the coalesced calls, coalescing, and point-to-point.
#include <utility>

#include "backend.h"
#include "backend_calls.h"
#include "tdist/torch/collectives.h"

namespace tdist::python {

namespace tt = tdist::torch;
using ::c10d::OpType;

// A send or receive made while coalescing: pending until endCoalescing issues its batch,
// then finished with it. Waiting on it (or polling it) drives the batch, whose transport
// requests complete only while somebody does.
class BatchedWork final : public Work {
 public:
  explicit BatchedWork(const char* op) : Work(op) {}

  // The batch `self` went out in: `self` finishes with it.
  static void issued(const std::shared_ptr<BatchedWork>& self, const WorkPtr& batch) {
    {
      MutexLock lock(self->batch_mu_);
      self->batch_ = batch;
    }
    batch->add_callback([weak = std::weak_ptr<BatchedWork>(self), done = batch.get()] {
      if (auto work = weak.lock()) work->finish(done->exception());
    });
  }

 protected:
  void poll(Deadline deadline) override TDIST_EXCLUDES(batch_mu_) {
    WorkPtr batch;
    {
      MutexLock lock(batch_mu_);
      batch = batch_;
    }
    if (batch == nullptr) return;  // endCoalescing has not issued it yet
    if (!deadline.is_never() && deadline.time() <= Clock::now()) {
      (void)batch->is_completed();
      return;
    }
    try {
      batch->synchronize(deadline);
    } catch (...) {  // its error reaches this Work through the callback; a timeout is ours
    }
  }

 private:
  Mutex batch_mu_;
  WorkPtr batch_ TDIST_GUARDED_BY(batch_mu_);
};

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
    const at::Tensor& t = single(tensors, "send", "tensor");
    const auto tag32 = static_cast<uint32_t>(tag);
    WorkPtr work = defer({tt::P2POp::Kind::kSend, t, dst, tag32});
    if (work == nullptr) work = tt::isend(t, dst, group(), tag32);
    return issue(OpType::SEND, {std::move(work)}, {}, false, ::c10d::kUnsetTimeout, &tensors);
  });
}

TdistBackend::WorkRef TdistBackend::recv(Tensors& tensors, int src, int tag) {
  return torch_errors([&] {
    const at::Tensor& t = single(tensors, "recv", "tensor");
    const auto tag32 = static_cast<uint32_t>(tag);
    WorkPtr work = defer({tt::P2POp::Kind::kRecv, t, src, tag32});
    if (work == nullptr) work = tt::irecv(t, src, group(), tag32);
    return issue(OpType::RECV, {std::move(work)}, tensors, false);
  });
}

WorkPtr TdistBackend::defer(tt::P2POp op) {
  if (!coalescing_on_.load(std::memory_order_acquire)) return nullptr;
  const char* name = op.kind == tt::P2POp::Kind::kSend ? "send" : "recv";
  TDIST_CHECK(op.peer >= 0 && op.peer < getSize() && op.peer != getRank(), InvalidArgument, name,
              ": rank ", op.peer, " is not another rank of this group (size ", getSize(),
              ", this rank ", getRank(), ")");
  MutexLock lock(coalescing_mu_);
  if (coalescing_ == nullptr) return nullptr;
  auto work = std::make_shared<BatchedWork>(name);
  coalescing_->p2p.push_back(std::move(op));
  coalescing_->p2p_works.push_back(work);
  return work;
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
    // The collectives in between were issued as they came (tdist's calls never block on
    // their peers); the sends and receives go out now, together. One Work covers them all
    // (theirs drive the batch).
    if (!done->p2p.empty()) {
      WorkPtr batch;
      try {
        batch = tt::batch_isend_irecv(done->p2p, group());
      } catch (...) {
        for (const auto& work : done->p2p_works) work->finish(std::current_exception());
        throw;
      }
      for (const auto& work : done->p2p_works) BatchedWork::issued(work, batch);
    }
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
