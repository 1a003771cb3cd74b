// TdistBackend (backend.h): torch.distributed's backend calls on tdist's tensor collectives.
#include "backend.h"

#include <utility>

#include "store_adapter.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "torch_work.h"

namespace tdist::python {
namespace {

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

// The one entry of a per-rank list (torch.distributed's functions pass one).
template <typename T>
T& single(std::vector<T>& list, const char* op, const char* what) {
  if (list.size() != 1) {
    TDIST_THROW(InvalidArgument, op, ": tdist takes exactly one ", what, " per call, got ",
                list.size());
  }
  return list[0];
}

// Whether the caller waits for the operation right away (async_op=False: torch 2.x tells
// through the options); then the calling thread runs it at once, with no hand-off to the
// group's worker thread.
template <typename Opts>
bool caller_waits(const Opts& opts) {
  if constexpr (requires { opts.asyncOp; }) {
    return !opts.asyncOp;
  } else {
    return false;
  }
}

}  // namespace

TdistBackend::TdistBackend(std::shared_ptr<tdist::ProcessGroup> group, std::string engine)
    : TorchBackendBase(group->rank(), group->size()),
      group_(std::move(group)),
      engine_(std::move(engine)) {}

TdistBackend::~TdistBackend() { progress_->stop(); }

c10::intrusive_ptr<TdistBackend> TdistBackend::create(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& engine) {
  return torch_errors([&] {
    if (engine != "auto" && engine != "tcp" && engine != "shm") {
      TDIST_THROW(InvalidArgument, "engine '", engine,
                  "' is not one the tdist backend serves: auto, tcp or shm");
    }
    auto adapter = std::make_shared<C10dStore>(store);
    adapter->set_timeout(timeout);
    auto group = backend_factory(engine)(adapter, rank, size, timeout);
    return c10::make_intrusive<TdistBackend>(std::move(group), engine);
  });
}

// Each call: validate and issue on the caller's thread (errors as torch's), run it there
// when the caller waits at once, then hand torch a TorchWork over the tdist Works and the
// tensors result() returns.
#define TDIST_ISSUE_NOW(type, outputs, run_now, ...)                                              \
  torch_errors([&] {                                                                              \
    std::vector<WorkPtr> works;                                                                   \
    __VA_ARGS__;                                                                                  \
    if (run_now) {                                                                                \
      for (const auto& w : works) w->wait();                                                      \
    }                                                                                             \
    return c10::make_intrusive<TorchWork>(getRank(), type, std::move(works), outputs, progress_); \
  })
#define TDIST_ISSUE(type, outputs, ...) \
  TDIST_ISSUE_NOW(type, outputs, caller_waits(opts), __VA_ARGS__)

TdistBackend::WorkRef TdistBackend::broadcast(Tensors& tensors,
                                              const ::c10d::BroadcastOptions& opts) {
  return TDIST_ISSUE(OpType::BROADCAST, tensors, {
    works.push_back(tt::broadcast_async(single(tensors, "broadcast", "tensor"),
                                        static_cast<int>(opts.rootRank), group_));
  });
}

TdistBackend::WorkRef TdistBackend::allreduce(Tensors& tensors,
                                              const ::c10d::AllreduceOptions& opts) {
  return TDIST_ISSUE(OpType::ALLREDUCE, tensors, {
    const ReduceOp op = to_reduce_op(opts.reduceOp);
    for (auto& t : tensors) works.push_back(tt::all_reduce_async(t, op, group_));
  });
}

TdistBackend::WorkRef TdistBackend::allreduce_coalesced(
    Tensors& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);
}

TdistBackend::WorkRef TdistBackend::reduce(Tensors& tensors, const ::c10d::ReduceOptions& opts) {
  return TDIST_ISSUE(OpType::REDUCE, tensors, {
    works.push_back(tt::reduce_async(single(tensors, "reduce", "tensor"),
                                     static_cast<int>(opts.rootRank), to_reduce_op(opts.reduceOp),
                                     group_));
  });
}

TdistBackend::WorkRef TdistBackend::allgather(TensorLists& outputs, Tensors& inputs,
                                              const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE(OpType::ALLGATHER, single(outputs, "all_gather", "output list"), {
    works.push_back(
        tt::all_gather_async(outputs[0], single(inputs, "all_gather", "input"), group_));
  });
}

TdistBackend::WorkRef TdistBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                    const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE(OpType::_ALLGATHER_BASE, Tensors{output},
                     { works.push_back(tt::all_gather_into_tensor_async(output, input, group_)); });
}

TdistBackend::WorkRef TdistBackend::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                        const ::c10d::AllgatherOptions& opts) {
  Tensors flat;
  for (const auto& list : outputs) flat.insert(flat.end(), list.begin(), list.end());
  return TDIST_ISSUE(OpType::ALLGATHER_COALESCED, flat, {
    if (outputs.size() != inputs.size()) {
      TDIST_THROW(InvalidArgument, "all_gather_coalesced: ", outputs.size(), " output lists for ",
                  inputs.size(), " inputs");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      works.push_back(tt::all_gather_async(outputs[i], inputs[i], group_));
    }
  });
}

TdistBackend::WorkRef TdistBackend::gather(TensorLists& outputs, Tensors& inputs,
                                           const ::c10d::GatherOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  Tensors gathered = getRank() == root && !outputs.empty() ? outputs[0] : Tensors{};
  return TDIST_ISSUE(OpType::GATHER, gathered, {
    if (getRank() == root) single(outputs, "gather", "output list");
    works.push_back(tt::gather_async(single(inputs, "gather", "input"), gathered, root, group_));
  });
}

TdistBackend::WorkRef TdistBackend::scatter(Tensors& outputs, TensorLists& inputs,
                                            const ::c10d::ScatterOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  return TDIST_ISSUE(OpType::SCATTER, outputs, {
    const Tensors pieces = getRank() == root ? single(inputs, "scatter", "input list") : Tensors{};
    works.push_back(tt::scatter_async(single(outputs, "scatter", "output"), pieces, root, group_));
  });
}

TdistBackend::WorkRef TdistBackend::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                   const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE(OpType::REDUCE_SCATTER, outputs, {
    works.push_back(tt::reduce_scatter_async(single(outputs, "reduce_scatter", "output"),
                                             single(inputs, "reduce_scatter", "input list"),
                                             to_reduce_op(opts.reduceOp), group_));
  });
}

TdistBackend::WorkRef TdistBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                         const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE(OpType::_REDUCE_SCATTER_BASE, Tensors{output}, {
    works.push_back(
        tt::reduce_scatter_tensor_async(output, input, to_reduce_op(opts.reduceOp), group_));
  });
}

TdistBackend::WorkRef TdistBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                  std::vector<int64_t>& output_split_sizes,
                                                  std::vector<int64_t>& input_split_sizes,
                                                  const ::c10d::AllToAllOptions& opts) {
  return TDIST_ISSUE(OpType::ALLTOALL_BASE, Tensors{output}, {
    works.push_back(
        tt::all_to_all_single_async(output, input, output_split_sizes, input_split_sizes, group_));
  });
}

TdistBackend::WorkRef TdistBackend::alltoall(Tensors& outputs, Tensors& inputs,
                                             const ::c10d::AllToAllOptions& opts) {
  return TDIST_ISSUE(OpType::ALLTOALL, outputs,
                     { works.push_back(tt::all_to_all_async(outputs, inputs, group_)); });
}

TdistBackend::WorkRef TdistBackend::send(Tensors& tensors, int dst, int tag) {
  return TDIST_ISSUE_NOW(OpType::SEND, Tensors{}, false, {
    works.push_back(
        tt::isend(single(tensors, "send", "tensor"), dst, group_, static_cast<uint32_t>(tag)));
  });
}

TdistBackend::WorkRef TdistBackend::recv(Tensors& tensors, int src, int tag) {
  return TDIST_ISSUE_NOW(OpType::RECV, tensors, false, {
    works.push_back(
        tt::irecv(single(tensors, "recv", "tensor"), src, group_, static_cast<uint32_t>(tag)));
  });
}

TdistBackend::WorkRef TdistBackend::recvAnysource(Tensors& /*tensors*/, int /*tag*/) {
  return TDIST_ISSUE_NOW(OpType::RECVANYSOURCE, Tensors{}, false, {
    TDIST_THROW(InvalidArgument,
                "recv: tdist matches messages by source rank; pass src= (receiving from "
                "any source is not supported)");
  });
}

TdistBackend::WorkRef TdistBackend::barrier(const ::c10d::BarrierOptions& opts) {
  return TDIST_ISSUE(OpType::BARRIER, Tensors{}, { works.push_back(tt::barrier_async(group_)); });
}

#if TORCH_VERSION_MAJOR >= 2
TdistBackend::WorkRef TdistBackend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const ::c10d::AllgatherOptions& opts) {
  return TDIST_ISSUE(OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs, {
    if (outputs.size() != inputs.size()) {
      TDIST_THROW(InvalidArgument, "all_gather_into_tensor_coalesced: ", outputs.size(),
                  " outputs for ", inputs.size(), " inputs");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      works.push_back(tt::all_gather_into_tensor_async(outputs[i], inputs[i], group_));
    }
  });
}

TdistBackend::WorkRef TdistBackend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const ::c10d::ReduceScatterOptions& opts) {
  return TDIST_ISSUE(OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, {
    if (outputs.size() != inputs.size()) {
      TDIST_THROW(InvalidArgument, "reduce_scatter_tensor_coalesced: ", outputs.size(),
                  " outputs for ", inputs.size(), " inputs");
    }
    const ReduceOp op = to_reduce_op(opts.reduceOp);
    for (size_t i = 0; i < inputs.size(); ++i) {
      works.push_back(tt::reduce_scatter_tensor_async(outputs[i], inputs[i], op, group_));
    }
  });
}
#endif

}  // namespace tdist::python
