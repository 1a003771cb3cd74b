// ProcessGroup's public operations (process_group.h): the argument checks every backend
// shares, with their texts, and the numbering of collectives; then the backend's do_*.
// A check that fails throws InvalidArgument before the backend sees the call.
#include <cstdint>
#include <limits>
#include <utility>

#include "core/call_site.h"
#include "core/op_fingerprint.h"
#include "diag/flight_recorder.h"
#include "tdist/error.h"
#include "tdist/process_group.h"

namespace tdist {
namespace {

using core::OpKind;
using Fp = core::OpFingerprint;

constexpr size_t kMaxSize = std::numeric_limits<size_t>::max();

void check_buffer(const char* op, const char* name, const void* p, size_t count) {
  TDIST_CHECK(p != nullptr || count == 0, InvalidArgument, op, ": ", name,
              " is null but the count is ", count);
}

// A known dtype (one cast from an integer may not be).
void check_dtype(const char* op, DType dtype) {
  TDIST_CHECK(dtype_size(dtype) != 0, InvalidArgument, op, ": dtype ", static_cast<int>(dtype),
              " is not a tdist DType");
}

// `blocks` blocks of `count` elements of `dtype` must have a size in bytes.
void check_bytes(const char* op, size_t count, DType dtype, size_t blocks = 1) {
  check_dtype(op, dtype);
  TDIST_CHECK(count <= kMaxSize / dtype_size(dtype) / blocks, InvalidArgument, op, ": count ",
              count, (blocks > 1 ? " per rank" : ""), " of ", dtype_name(dtype),
              " is too large: the buffer's size in bytes overflows size_t");
}

// The sum of `counts`, whose bytes must fit in size_t.
size_t checked_total(const char* op, const char* name, std::span<const size_t> counts,
                     DType dtype) {
  check_dtype(op, dtype);
  const size_t limit = kMaxSize / dtype_size(dtype);
  size_t total = 0;
  for (size_t c : counts) {
    TDIST_CHECK(c <= limit - total, InvalidArgument, op, ": the ", name, " counts of ",
                dtype_name(dtype), " are too large: their size in bytes overflows size_t");
    total += c;
  }
  return total;
}

void check_root(const char* op, int root, int size) {
  TDIST_CHECK(root >= 0 && root < size, InvalidArgument, op, ": root ", root, " is outside 0..",
              size - 1, " (group of ", size, ")");
}

void check_peer(const char* op, int peer, int rank, int size) {
  TDIST_CHECK(peer >= 0 && peer < size, InvalidArgument, op, ": peer ", peer, " is outside 0..",
              size - 1, " (group of ", size, ")");
  TDIST_CHECK(peer != rank, InvalidArgument, op, ": rank ", rank,
              " cannot send to or receive from itself");
}

}  // namespace

template <typename Call>
WorkPtr ProcessGroup::numbered(core::OpFingerprint fp, const SourceLocation& where, Call&& call) {
  if (debug_callsite_) {
    const CallSite* site = CallSite::outermost();
    if (site == nullptr) {
      fp.site = core::call_site_id_of_literal(where.file_name(), where.line());
    } else {
      fp.site = site->literal() ? core::call_site_id_of_literal(site->file(), site->line())
                                : core::call_site_id(site->file(), site->line());
    }
  }
  if (debug_detail_) detail_check(fp);
  WorkPtr work;
  {
    MutexLock lock(issue_mu_);
    const uint64_t seq = next_seq_.load(std::memory_order_relaxed);
    if (!registered_) {
      registered_ = true;
      diag::register_group(weak_from_this());
    }
    recorder_->enqueued(seq, fp);
    struct Issuing {  // issuing_fingerprint() while the backend's do_* runs
      const core::OpFingerprint*& slot;
      ~Issuing() { slot = nullptr; }
    } issuing{issuing_ = &fp};
    work = call(seq);
    next_seq_.store(seq + 1, std::memory_order_release);
  }
  // The caller waits at once (WaitsAtOnce): a backend may have left the operation to this
  // thread, which its Work's poll runs (pg::QueuedWork); outside issue_mu_, so that other
  // threads issue meanwhile. (A host CommProcessGroup runs it inside do_*, under issue_mu_,
  // and returns it finished: no Work to make.) Other Works are only tested.
  if (WaitsAtOnce::active()) (void)work->is_completed();
  return work;
}

namespace {
thread_local bool waits_at_once = false;
}  // namespace

WaitsAtOnce::WaitsAtOnce(bool on) : outer_(std::exchange(waits_at_once, on)) {}
WaitsAtOnce::~WaitsAtOnce() { waits_at_once = outer_; }
bool WaitsAtOnce::active() { return waits_at_once; }

const char* ProcessGroup::p2p_name(std::span<const P2POp> ops) {
  if (ops.size() != 1) return "batch_isend_irecv";
  return ops[0].kind == P2POp::Kind::kSend ? "isend" : "irecv";
}

WorkPtr ProcessGroup::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op, SourceLocation where) {
  check_bytes("all_reduce", count, dtype);
  validate(op, dtype);
  check_buffer("all_reduce", "send", send, count);
  check_buffer("all_reduce", "recv", recv, count);
  return numbered(Fp::make(OpKind::kAllReduce, dtype, count, op.kind), where,
                  [&](uint64_t seq) { return do_all_reduce(seq, send, recv, count, dtype, op); });
}

WorkPtr ProcessGroup::broadcast(void* data, size_t count, DType dtype, int root,
                                SourceLocation where) {
  check_root("broadcast", root, size_);
  check_bytes("broadcast", count, dtype);
  check_buffer("broadcast", "data", data, count);
  return numbered(Fp::make(OpKind::kBroadcast, dtype, count, {}, root), where,
                  [&](uint64_t seq) { return do_broadcast(seq, data, count, dtype, root); });
}

WorkPtr ProcessGroup::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                             int root, SourceLocation where) {
  check_bytes("reduce", count, dtype);
  validate(op, dtype);
  check_root("reduce", root, size_);
  check_buffer("reduce", "send", send, count);
  if (rank_ == root) check_buffer("reduce", "recv", recv, count);
  return numbered(Fp::make(OpKind::kReduce, dtype, count, op.kind, root), where,
                  [&](uint64_t seq) { return do_reduce(seq, send, recv, count, dtype, op, root); });
}

WorkPtr ProcessGroup::all_gather(const void* send, void* recv, size_t count, DType dtype,
                                 SourceLocation where) {
  check_bytes("all_gather", count, dtype, static_cast<size_t>(size_));
  check_buffer("all_gather", "send", send, count);
  check_buffer("all_gather", "recv", recv, count);
  return numbered(Fp::make(OpKind::kAllGather, dtype, count), where,
                  [&](uint64_t seq) { return do_all_gather(seq, send, recv, count, dtype); });
}

WorkPtr ProcessGroup::all_gatherv(const void* send, size_t send_count, void* recv,
                                  std::span<const size_t> recv_counts, DType dtype,
                                  SourceLocation where) {
  TDIST_CHECK(recv_counts.size() == static_cast<size_t>(size_), InvalidArgument,
              "all_gatherv: ", recv_counts.size(), " recv counts given for a group of ", size_);
  const size_t mine = recv_counts[static_cast<size_t>(rank_)];
  TDIST_CHECK(mine == send_count, InvalidArgument, "all_gatherv: recv_counts[", rank_, "] is ",
              mine, " but this rank sends ", send_count);
  const size_t total = checked_total("all_gatherv", "recv", recv_counts, dtype);
  check_buffer("all_gatherv", "send", send, send_count);
  check_buffer("all_gatherv", "recv", recv, total);
  return numbered(Fp::make(OpKind::kAllGatherv, dtype, total), where, [&](uint64_t seq) {
    return do_all_gatherv(seq, send, send_count, recv, recv_counts, dtype);
  });
}

WorkPtr ProcessGroup::gather(const void* send, void* recv, size_t count, DType dtype, int root,
                             SourceLocation where) {
  check_root("gather", root, size_);
  check_bytes("gather", count, dtype, static_cast<size_t>(size_));
  check_buffer("gather", "send", send, count);
  if (rank_ == root) check_buffer("gather", "recv", recv, count);
  return numbered(Fp::make(OpKind::kGather, dtype, count, {}, root), where,
                  [&](uint64_t seq) { return do_gather(seq, send, recv, count, dtype, root); });
}

WorkPtr ProcessGroup::scatter(const void* send, void* recv, size_t count, DType dtype, int root,
                              SourceLocation where) {
  check_root("scatter", root, size_);
  check_bytes("scatter", count, dtype, static_cast<size_t>(size_));
  check_buffer("scatter", "recv", recv, count);
  if (rank_ == root) check_buffer("scatter", "send", send, count);
  return numbered(Fp::make(OpKind::kScatter, dtype, count, {}, root), where,
                  [&](uint64_t seq) { return do_scatter(seq, send, recv, count, dtype, root); });
}

WorkPtr ProcessGroup::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op, SourceLocation where) {
  check_bytes("reduce_scatter", count, dtype, static_cast<size_t>(size_));
  validate(op, dtype);
  check_buffer("reduce_scatter", "send", send, count);
  check_buffer("reduce_scatter", "recv", recv, count);
  return numbered(
      Fp::make(OpKind::kReduceScatter, dtype, count, op.kind), where,
      [&](uint64_t seq) { return do_reduce_scatter(seq, send, recv, count, dtype, op); });
}

WorkPtr ProcessGroup::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                 SourceLocation where) {
  check_bytes("all_to_all", count, dtype, static_cast<size_t>(size_));
  check_buffer("all_to_all", "send", send, count);
  check_buffer("all_to_all", "recv", recv, count);
  return numbered(Fp::make(OpKind::kAllToAll, dtype, count), where,
                  [&](uint64_t seq) { return do_all_to_all(seq, send, recv, count, dtype); });
}

WorkPtr ProcessGroup::all_to_allv(const void* send, std::span<const size_t> send_counts, void* recv,
                                  std::span<const size_t> recv_counts, DType dtype,
                                  SourceLocation where) {
  TDIST_CHECK(send_counts.size() == static_cast<size_t>(size_) &&
                  recv_counts.size() == static_cast<size_t>(size_),
              InvalidArgument, "all_to_allv: ", send_counts.size(), " send and ",
              recv_counts.size(), " recv counts given for a group of ", size_);
  check_buffer("all_to_allv", "send", send,
               checked_total("all_to_allv", "send", send_counts, dtype));
  check_buffer("all_to_allv", "recv", recv,
               checked_total("all_to_allv", "recv", recv_counts, dtype));
  return numbered(Fp::make(OpKind::kAllToAllv, dtype, Fp::kAnyCount), where, [&](uint64_t seq) {
    return do_all_to_allv(seq, send, send_counts, recv, recv_counts, dtype);
  });
}

WorkPtr ProcessGroup::barrier(SourceLocation where) {
  return numbered(Fp::make(OpKind::kBarrier), where, [&](uint64_t seq) { return do_barrier(seq); });
}

WorkPtr ProcessGroup::isend(const void* data, size_t count, DType dtype, int dst, uint32_t tag) {
  const P2POp op{P2POp::Kind::kSend, const_cast<void*>(data), count, dtype, dst, tag};
  return batch_isend_irecv(std::span<const P2POp>(&op, 1));
}

WorkPtr ProcessGroup::irecv(void* data, size_t count, DType dtype, int src, uint32_t tag) {
  const P2POp op{P2POp::Kind::kRecv, data, count, dtype, src, tag};
  return batch_isend_irecv(std::span<const P2POp>(&op, 1));
}

WorkPtr ProcessGroup::irecv_any(void* data, size_t count, DType dtype, uint32_t tag) {
  constexpr const char* kName = "irecv_any";
  check_bytes(kName, count, dtype);
  TDIST_CHECK(data != nullptr || count == 0, InvalidArgument, kName,
              ": the buffer is null but the count is ", count);
  TDIST_CHECK(size_ > 1, InvalidArgument, kName, ": rank ", rank_,
              " is alone in its group (group of 1): no other rank can send to it");
  return do_irecv_any(data, count, dtype, tag);
}

WorkPtr ProcessGroup::do_irecv_any(void* /*data*/, size_t /*count*/, DType /*dtype*/,
                                   uint32_t /*tag*/) {
  TDIST_THROW(InvalidArgument, "irecv_any: receiving from any source is not supported by ",
              backend_name());
}

WorkPtr ProcessGroup::batch_isend_irecv(std::span<const P2POp> ops) {
  const char* name = p2p_name(ops);
  for (const P2POp& op : ops) {
    TDIST_CHECK(op.kind == P2POp::Kind::kSend || op.kind == P2POp::Kind::kRecv, InvalidArgument,
                name, ": op kind ", static_cast<int>(op.kind), " is neither send nor recv");
    check_peer(name, op.peer, rank_, size_);
    check_bytes(name, op.count, op.dtype);
    TDIST_CHECK(op.data != nullptr || op.count == 0, InvalidArgument, name,
                ": the buffer is null but the count is ", op.count);
  }
  return do_batch_isend_irecv(ops);
}

}  // namespace tdist
