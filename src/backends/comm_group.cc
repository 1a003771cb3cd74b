// CommProcessGroup (comm_group.h): the ordered worker and the collectives.
#include "backends/comm_group.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "backends/error_context.h"
#include "collectives/collectives.h"
#include "core/block_cache.h"
#include "core/coarse_clock.h"
#include "tdist/error.h"

namespace tdist::backends {
namespace {

// How long the worker leaves a new operation to its caller: `all_reduce(...)->wait()` from
// C++, or torch.distributed's synchronous calls through Python, claim it well within this,
// and then run it on their own thread with no hand-off. Work nobody waits on starts this
// much later, which the compute it overlaps with (DDP's backward) hides.
constexpr std::chrono::microseconds kClaimDelay(200);

size_t bytes_of(size_t count, DType dtype) { return count * dtype_size(dtype); }

size_t total(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

std::vector<size_t> to_bytes(std::span<const size_t> counts, DType dtype) {
  std::vector<size_t> out(counts.begin(), counts.end());
  for (size_t& c : out) c *= dtype_size(dtype);
  return out;
}

// all_to_allv with `send` and `recv` allowed to overlap (the in-place form, send == recv):
// the algorithm needs disjoint buffers, so an overlapping send is copied first.
void all_to_allv_any(const coll::Ctx& ctx, const void* send, std::span<const size_t> send_bytes,
                     void* recv, std::span<const size_t> recv_bytes) {
  const auto* s = static_cast<const uint8_t*>(send);
  const auto* r = static_cast<const uint8_t*>(recv);
  const size_t sn = total(send_bytes);
  const size_t rn = total(recv_bytes);
  if (sn == 0 || rn == 0 || s + sn <= r || r + rn <= s) {
    coll::all_to_allv(ctx, send, send_bytes, recv, recv_bytes);
    return;
  }
  std::vector<uint8_t> copy(s, s + sn);
  coll::all_to_allv(ctx, copy.data(), send_bytes, recv, recv_bytes);
}

}  // namespace

CommProcessGroup::CommProcessGroup(std::string backend, CommFactory factory,
                                   std::shared_ptr<Store> store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::vector<int> global_ranks)
    : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)),
      backend_(std::move(backend)),
      factory_(std::move(factory)),
      comm_(factory_(this->store(), rank, size, timeout)),
      ops_(kClaimDelay, timeout) {
  TDIST_CHECK(comm_ != nullptr, Error, backend_, ": the transport factory returned null");
}

CommProcessGroup::~CommProcessGroup() { ops_.stop(); }

std::shared_ptr<ProcessGroup> CommProcessGroup::make_subgroup(std::shared_ptr<Store> store,
                                                              int rank, int size,
                                                              std::vector<int> global_ranks) {
  return std::make_shared<CommProcessGroup>(backend_, factory_, std::move(store), rank, size,
                                            timeout(), std::move(global_ranks));
}

template <typename Run>
WorkPtr CommProcessGroup::enqueue(uint64_t seq, const char* op, Run run) {
  // One block from this thread's cache: the Work holds the operation (a std::function
  // over a reference stores it in place).
  auto call = [this, run = std::move(run)](uint64_t n, Work& work) {
    execute(n, work, std::cref(run));
  };
  using Call = QueuedCall<decltype(call)>;
  auto work = std::allocate_shared<Call>(core::CachingAllocator<Call>(), op, weak_from_this(), ops_,
                                         std::move(call));
  ops_.push(seq, work);
  return work;
}

void CommProcessGroup::execute(uint64_t seq, Work& work,
                               const std::function<void(const coll::Ctx&)>& run) {
  auto where = [&] { return describe(rank(), size(), backend_, work.op(), seq); };
  if (std::exception_ptr failed = comm_->error()) {
    work.finish(add_context(failed, where() + ": the group was aborted earlier: "));
    return;
  }
  try {
    coll::Ctx ctx{*comm_, seq, core::coarse_deadline_after(timeout()), settings_};
    run(ctx);
    work.finish();
  } catch (...) {
    std::exception_ptr error = add_context(std::current_exception(), where() + ": ");
    comm_->abort(error);
    work.finish(error);
  }
}

WorkPtr CommProcessGroup::do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype, ReduceOp op) {
  return enqueue(seq, "all_reduce", [=](const coll::Ctx& ctx) {
    coll::all_reduce(ctx, send, recv, count, dtype, op);
  });
}

WorkPtr CommProcessGroup::do_broadcast(uint64_t seq, void* data, size_t count, DType dtype,
                                       int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, "broadcast",
                 [=](const coll::Ctx& ctx) { coll::broadcast(ctx, data, bytes, root); });
}

WorkPtr CommProcessGroup::do_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, ReduceOp op, int root) {
  return enqueue(seq, "reduce", [=](const coll::Ctx& ctx) {
    coll::reduce(ctx, send, recv, count, dtype, op, root);
  });
}

WorkPtr CommProcessGroup::do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  std::vector<size_t> bytes(static_cast<size_t>(size()), bytes_of(count, dtype));
  return enqueue(seq, "all_gather", [=, bytes = std::move(bytes)](const coll::Ctx& ctx) {
    coll::all_gatherv(ctx, send, recv, bytes);
  });
}

WorkPtr CommProcessGroup::do_all_gatherv(uint64_t seq, const void* send, size_t /*send_count*/,
                                         void* recv, std::span<const size_t> recv_counts,
                                         DType dtype) {
  return enqueue(seq, "all_gatherv",
                 [=, bytes = to_bytes(recv_counts, dtype)](const coll::Ctx& ctx) {
                   coll::all_gatherv(ctx, send, recv, bytes);
                 });
}

WorkPtr CommProcessGroup::do_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, "gather",
                 [=](const coll::Ctx& ctx) { coll::gather(ctx, send, recv, bytes, root); });
}

WorkPtr CommProcessGroup::do_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                     DType dtype, int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, "scatter",
                 [=](const coll::Ctx& ctx) { coll::scatter(ctx, send, recv, bytes, root); });
}

WorkPtr CommProcessGroup::do_reduce_scatter(uint64_t seq, const void* send, void* recv,
                                            size_t count, DType dtype, ReduceOp op) {
  return enqueue(seq, "reduce_scatter", [=](const coll::Ctx& ctx) {
    coll::reduce_scatter(ctx, send, recv, count, dtype, op);
  });
}

WorkPtr CommProcessGroup::do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  std::vector<size_t> bytes(static_cast<size_t>(size()), bytes_of(count, dtype));
  return enqueue(seq, "all_to_all", [=, bytes = std::move(bytes)](const coll::Ctx& ctx) {
    all_to_allv_any(ctx, send, bytes, recv, bytes);
  });
}

WorkPtr CommProcessGroup::do_all_to_allv(uint64_t seq, const void* send,
                                         std::span<const size_t> send_counts, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype) {
  return enqueue(seq, "all_to_allv",
                 [=, sb = to_bytes(send_counts, dtype), rb = to_bytes(recv_counts, dtype)](
                     const coll::Ctx& ctx) { all_to_allv_any(ctx, send, sb, recv, rb); });
}

WorkPtr CommProcessGroup::do_barrier(uint64_t seq) {
  return enqueue(seq, "barrier", [](const coll::Ctx& ctx) { coll::barrier(ctx); });
}

void CommProcessGroup::abort() {
  comm_->abort(
      std::make_exception_ptr(PeerError(describe(rank(), size(), backend_, "abort", next_seq()) +
                                        ": the group was aborted by the user")));
}

}  // namespace tdist::backends
