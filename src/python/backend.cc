// TdistBackend (backend.h): torch.distributed's backend calls on tdist's tensor collectives.
#include "backend.h"

#include <utility>

#include "backend_calls.h"
#include "store_adapter.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "torch_work.h"

namespace tdist::python {

namespace tt = tdist::torch;
using ::c10d::OpType;

ReduceOp to_reduce_op(const ::c10d::ReduceOp& op) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      return ReduceOpKind::kSum;
    case ::c10d::ReduceOp::AVG:
      return ReduceOpKind::kAvg;
    case ::c10d::ReduceOp::PRODUCT:
      return ReduceOpKind::kProd;
    case ::c10d::ReduceOp::MIN:
      return ReduceOpKind::kMin;
    case ::c10d::ReduceOp::MAX:
      return ReduceOpKind::kMax;
    case ::c10d::ReduceOp::BAND:
      return ReduceOpKind::kBand;
    case ::c10d::ReduceOp::BOR:
      return ReduceOpKind::kBor;
    case ::c10d::ReduceOp::BXOR:
      return ReduceOpKind::kBxor;
    case ::c10d::ReduceOp::PREMUL_SUM: {
      const auto* s = dynamic_cast<const ::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (s == nullptr) break;
#if TORCH_VERSION_MAJOR >= 2
      const double factor =
          s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
#else  // LibTorch 1.13: one factor tensor per input tensor
      const double factor =
          s->tensor_factors.empty() ? s->double_factor : s->tensor_factors[0].item<double>();
#endif
      return ReduceOp::premul_sum(factor);
    }
    default:
      break;
  }
  TDIST_THROW(InvalidArgument, "reduce op ", static_cast<int>(op.op_),
              " is not supported by tdist (sum, avg, product, min, max, band, bor, bxor, "
              "premul_sum)");
}

TdistBackend::TdistBackend(std::shared_ptr<tdist::ProcessGroup> group, std::string engine,
                           c10::intrusive_ptr<::c10d::Store> store)
    : TorchBackendBase(group->rank(), group->size()),
      group_(std::move(group)),
      engine_(std::move(engine)),
      store_(std::move(store)),
      handle_(new_reconfigure_handle()) {}

TdistBackend::TdistBackend(int rank, int size, std::chrono::milliseconds timeout,
                           std::string engine, c10::intrusive_ptr<::c10d::Store> store)
    : TorchBackendBase(rank, size),
      engine_(std::move(engine)),
      store_(std::move(store)),
      handle_(new_reconfigure_handle()),
      deferred_timeout_(timeout) {}

TdistBackend::~TdistBackend() { progress_->stop(); }

c10::intrusive_ptr<TdistBackend> TdistBackend::create(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& engine, bool defer_group) {
  return torch_errors([&] {
    if (engine != "auto" && engine != "tcp" && engine != "shm") {
      TDIST_THROW(InvalidArgument, "engine '", engine,
                  "' is not one the tdist backend serves: auto, tcp or shm");
    }
    if (defer_group) return c10::make_intrusive<TdistBackend>(rank, size, timeout, engine, store);
    auto adapter = std::make_shared<C10dStore>(store);
    adapter->set_timeout(timeout);
    auto group = backend_factory(engine)(adapter, rank, size, timeout);
    return c10::make_intrusive<TdistBackend>(std::move(group), engine, store);
  });
}

TdistBackend::WorkRef TdistBackend::issue(OpType type, std::vector<WorkPtr> works,
                                          std::vector<at::Tensor> outputs, bool run_now,
                                          std::chrono::milliseconds timeout,
                                          const std::vector<at::Tensor>* inputs) {
  count(type);
  if (coalescing_on_.load(std::memory_order_acquire)) coalesce(works, outputs);
  const std::chrono::milliseconds limit = timeout_of(timeout);
  auto work = c10::make_intrusive<TorchWork>(
      getRank(), type, std::move(works), std::move(outputs), progress_,
      limit == ::c10d::kUnsetTimeout ? Deadline::never() : Deadline::after(limit),
      timing_.load(std::memory_order_relaxed), inputs);
  // The caller waits at once (async_op=False): its thread runs the operation now, with no
  // hand-off to the group's worker thread.
  if (run_now) work->wait(kNoTimeout);
  return work;
}

TdistBackend::WorkRef TdistBackend::finished(OpType type, const std::vector<WorkPtr>& works) {
  count(type);
  for (const auto& w : works) w->wait(Deadline::never());
  return {};
}

void TdistBackend::count(OpType type) {
  const bool p2p = type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
  if (!p2p) collectives_.fetch_add(1, std::memory_order_relaxed);
}

bool TdistBackend::finishes_in_call(bool run_now, std::chrono::milliseconds timeout) const {
  return run_now && !coalescing_on_.load(std::memory_order_acquire) &&
         !timing_.load(std::memory_order_relaxed) && !profiler_on() &&
         timeout_of(timeout) == ::c10d::kUnsetTimeout;
}

TdistBackend::WorkRef TdistBackend::broadcast(Tensors& tensors,
                                              const ::c10d::BroadcastOptions& opts) {
  return TDIST_ISSUE(OpType::BROADCAST, tensors, {
    works.push_back(tt::broadcast_async(single(tensors, "broadcast", "tensor"),
                                        static_cast<int>(opts.rootRank), group()));
  });
}

TdistBackend::WorkRef TdistBackend::allreduce(Tensors& tensors,
                                              const ::c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].is_sparse()) return sparse_allreduce(tensors, opts);
  return TDIST_ISSUE(OpType::ALLREDUCE, tensors, {
    const ReduceOp op = to_reduce_op(opts.reduceOp);
    for (auto& t : tensors) works.push_back(tt::all_reduce_async(t, op, group()));
  });
}

// A sparse tensor's sum, gathered (tdist_torch's all_reduce_sparse) and copied into it as
// gloo does; blocking, so the Work is complete when returned.
TdistBackend::WorkRef TdistBackend::sparse_allreduce(Tensors& tensors,
                                                     const ::c10d::AllreduceOptions& opts) {
  return TDIST_ISSUE(OpType::ALLREDUCE, tensors, {
    TDIST_CHECK(opts.reduceOp.op_ == ::c10d::ReduceOp::SUM, InvalidArgument,
                "all_reduce: a sparse tensor can only be summed (ReduceOp.SUM)");
    at::Tensor& t = single(tensors, "all_reduce", "tensor");
    const at::Tensor sum = tt::all_reduce_sparse(t, group());
    t.copy_(sum);
  });
}

#if TORCH_VERSION_MAJOR >= 2
TdistBackend::WorkRef TdistBackend::allreduce_sparse(Tensors& tensors,
                                                     const ::c10d::AllreduceOptions& opts) {
  return sparse_allreduce(tensors, opts);
}
#endif

TdistBackend::WorkRef TdistBackend::reduce(Tensors& tensors, const ::c10d::ReduceOptions& opts) {
  return TDIST_ISSUE(OpType::REDUCE, tensors, {
    works.push_back(tt::reduce_async(single(tensors, "reduce", "tensor"),
                                     static_cast<int>(opts.rootRank), to_reduce_op(opts.reduceOp),
                                     group()));
  });
}

TdistBackend::WorkRef TdistBackend::allgather(TensorLists& outputs, Tensors& inputs,
                                              const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE_IN(OpType::ALLGATHER, inputs, single(outputs, "all_gather", "output list"), {
    works.push_back(
        tt::all_gather_async(outputs[0], single(inputs, "all_gather", "input"), group()));
  });
}

TdistBackend::WorkRef TdistBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                    const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE_IN(OpType::_ALLGATHER_BASE, Tensors{input}, Tensors{output}, {
    works.push_back(tt::all_gather_into_tensor_async(output, input, group()));
  });
}

TdistBackend::WorkRef TdistBackend::gather(TensorLists& outputs, Tensors& inputs,
                                           const ::c10d::GatherOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  Tensors gathered = getRank() == root && !outputs.empty() ? outputs[0] : Tensors{};
  return TDIST_ISSUE_IN(OpType::GATHER, inputs, gathered, {
    if (getRank() == root) single(outputs, "gather", "output list");
    works.push_back(tt::gather_async(single(inputs, "gather", "input"), gathered, root, group()));
  });
}

TdistBackend::WorkRef TdistBackend::scatter(Tensors& outputs, TensorLists& inputs,
                                            const ::c10d::ScatterOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  return TDIST_ISSUE(OpType::SCATTER, outputs, {
    const Tensors pieces = getRank() == root ? single(inputs, "scatter", "input list") : Tensors{};
    works.push_back(tt::scatter_async(single(outputs, "scatter", "output"), pieces, root, group()));
  });
}

TdistBackend::WorkRef TdistBackend::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                   const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE(OpType::REDUCE_SCATTER, outputs, {
    works.push_back(tt::reduce_scatter_async(single(outputs, "reduce_scatter", "output"),
                                             single(inputs, "reduce_scatter", "input list"),
                                             to_reduce_op(opts.reduceOp), group()));
  });
}

TdistBackend::WorkRef TdistBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                         const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE_IN(OpType::_REDUCE_SCATTER_BASE, Tensors{input}, Tensors{output}, {
    works.push_back(
        tt::reduce_scatter_tensor_async(output, input, to_reduce_op(opts.reduceOp), group()));
  });
}

TdistBackend::WorkRef TdistBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                  std::vector<int64_t>& output_split_sizes,
                                                  std::vector<int64_t>& input_split_sizes,
                                                  const ::c10d::AllToAllOptions& opts) {
  return TDIST_ISSUE(OpType::ALLTOALL_BASE, Tensors{output}, {
    works.push_back(
        tt::all_to_all_single_async(output, input, output_split_sizes, input_split_sizes, group()));
  });
}

TdistBackend::WorkRef TdistBackend::alltoall(Tensors& outputs, Tensors& inputs,
                                             const ::c10d::AllToAllOptions& opts) {
  return TDIST_ISSUE(OpType::ALLTOALL, outputs,
                     { works.push_back(tt::all_to_all_async(outputs, inputs, group())); });
}

}  // namespace tdist::python
