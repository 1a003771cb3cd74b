// Internal helpers of the collective algorithms (detail.h).
#include "collectives/detail.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/reduce_kernels.h"
#include "tdist/error.h"

namespace tdist::coll::detail {
namespace {

struct ScratchStats {
  size_t live = 0;
  size_t peak = 0;
};
thread_local ScratchStats g_scratch;

// One buffer kept per thread for the next Scratch (the largest freed, up to a bound).
struct ScratchCache {
  std::unique_ptr<uint8_t[]> data;
  size_t bytes = 0;
};
thread_local ScratchCache g_scratch_cache;
constexpr size_t kScratchCacheMax = size_t{16} << 20;

}  // namespace

RequestQueue::~RequestQueue() {
  if (!empty() && ctx_.comm.error() == nullptr) {
    ctx_.comm.abort(std::make_exception_ptr(
        PeerError("a collective stopped with messages in flight; the group was aborted")));
  }
}

void RequestQueue::push(transport::RequestPtr request, size_t key) {
  if (empty()) {
    head_ = count_ = 0;
    spilled_.clear();
  }
  if (count_ < kInline) {
    inline_[count_] = Entry{std::move(request), key};
  } else {
    spilled_.push_back(Entry{std::move(request), key});
  }
  ++count_;
}

void RequestQueue::wait_front() {
  Entry& front = at(head_);
  try {
    front.request->wait(ctx_.deadline);
  } catch (...) {
    // Buffers are still in the transport's hands: abort so they are released.
    ctx_.comm.abort(std::current_exception());
    throw;
  }
  front.request.reset();
  ++head_;
}

void RequestQueue::wait_through(size_t key) {
  while (!empty() && at(head_).key <= key) wait_front();
}

void RequestQueue::wait_all() {
  while (!empty()) wait_front();
}

Scratch::Scratch(size_t bytes) : bytes_(bytes) { init_host(); }

void Scratch::init_host() {
  const size_t bytes = bytes_;
  // Reuse this thread's kept buffer when it is large enough: a fresh large allocation is
  // mmapped, and faulting its pages in costs more than a mid-size collective's transfer.
  ScratchCache& cache = g_scratch_cache;
  if (bytes > 0 && cache.data && cache.bytes >= bytes) {
    data_ = std::move(cache.data);
    capacity_ = cache.bytes;
    cache.bytes = 0;
  } else {
    data_ = std::make_unique_for_overwrite<uint8_t[]>(bytes);
    capacity_ = bytes;
  }
  g_scratch.live += bytes;
  g_scratch.peak = std::max(g_scratch.peak, g_scratch.live);
}

Scratch::Scratch(const Ctx& ctx, size_t bytes)
    : bytes_(bytes), device_(bytes > 0 ? ctx.device : nullptr) {
  // Empty scratch is a host one on devices too: its data() is not null (algorithms compute
  // addresses in it that they never use).
  if (device_ == nullptr) {
    init_host();
  } else {
    device_data_ = static_cast<uint8_t*>(device_->allocate(bytes));
  }
}

Scratch::~Scratch() {
  if (device_ != nullptr) {
    if (device_data_ != nullptr) device_->release(device_data_, bytes_);
    return;
  }
  g_scratch.live -= bytes_;
  ScratchCache& cache = g_scratch_cache;
  if (capacity_ > cache.bytes && capacity_ <= kScratchCacheMax) {
    cache.data = std::move(data_);
    cache.bytes = capacity_;
  }
}

size_t scratch_peak_bytes() { return g_scratch.peak; }
void reset_scratch_peak() { g_scratch.peak = g_scratch.live; }

void exchange_reduce(const Ctx& ctx, int peer, uint32_t step, const void* send, size_t send_count,
                     void* dst, size_t recv_count, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  const size_t ce = chunk_elems(ctx, es);
  const bool same = send == dst;
  const uint64_t t = tag(ctx, step);
  if (send_count <= ce && recv_count <= ce && recv_count * es <= kSmallExchangeBytes &&
      ctx.device == nullptr) {
    // One message each way, small (the latency-bound case): received on the stack, folded
    // in once both are done.
    alignas(64) uint8_t slot[kSmallExchangeBytes];
    RequestQueue q(ctx);
    if (send_count > 0) q.push(isend(ctx, peer, t, send, send_count * es));
    if (recv_count > 0) q.push(irecv(ctx, peer, t, slot, recv_count * es));
    q.wait_all();
    if (recv_count > 0) core::reduce_into(dst, slot, recv_count, dtype, op);
    return;
  }
  RequestQueue sends(ctx);
  const size_t send_chunks = ceil_div(send_count, ce);
  for (size_t c = 0; c < send_chunks; ++c) {
    const Span s = chunk_of(send_count, ce, c);
    sends.push(isend(ctx, peer, t, at(send, s.offset * es), s.length * es), c);
  }
  const size_t recv_chunks = ceil_div(recv_count, ce);
  if (recv_chunks > 0) {
    const size_t slot_elems = std::min(ce, recv_count);
    Scratch scratch(ctx, std::min(kPipelineDepth, recv_chunks) * slot_elems * es);
    RequestQueue recvs(ctx);
    size_t posted = 0;
    for (size_t c = 0; c < recv_chunks; ++c) {
      for (; posted < std::min(recv_chunks, c + kPipelineDepth); ++posted) {
        const Span s = chunk_of(recv_count, ce, posted);
        uint8_t* slot = scratch.data() + (posted % kPipelineDepth) * slot_elems * es;
        recvs.push(irecv(ctx, peer, t, slot, s.length * es), posted);
      }
      recvs.wait_front();
      if (same) sends.wait_through(c);
      const Span s = chunk_of(recv_count, ce, c);
      reduce_into(ctx, at(dst, s.offset * es),
                  scratch.data() + (c % kPipelineDepth) * slot_elems * es, s.length, dtype, op);
    }
  }
  sends.wait_all();
}

void reduce_into(const Ctx& ctx, void* dst, const void* src, size_t count, DType dtype,
                 ReduceOp op) {
  if (ctx.device != nullptr) {
    ctx.device->reduce(dst, dst, src, count, dtype, op);
  } else {
    core::reduce_into(dst, src, count, dtype, op);
  }
}

void reduce(const Ctx& ctx, void* dst, const void* a, const void* b, size_t count, DType dtype,
            ReduceOp op) {
  if (ctx.device != nullptr) {
    ctx.device->reduce(dst, a, b, count, dtype, op);
  } else {
    core::reduce(dst, a, b, count, dtype, op);
  }
}

void premultiply(const Ctx& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  if (ctx.device != nullptr) {
    ctx.device->premultiply(data, count, dtype, op);
  } else {
    core::premultiply(data, count, dtype, op);
  }
}

void finish(const Ctx& ctx, void* data, size_t count, DType dtype, ReduceOp op, int world_size) {
  if (ctx.device != nullptr) {
    ctx.device->finish(data, count, dtype, op, world_size);
  } else {
    core::finish(data, count, dtype, op, world_size);
  }
}

void copy(const Ctx& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (ctx.device != nullptr) {
    ctx.device->copy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void prepare_local(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                   ReduceOp op) {
  if (send != recv) copy(ctx, recv, send, count * dtype_size(dtype));
  premultiply(ctx, recv, count, dtype, op);
}

void check_root(const Ctx& ctx, const char* op, int root) {
  TDIST_CHECK(root >= 0 && root < ctx.comm.size(), InvalidArgument, op, ": root ", root,
              " is outside 0..", ctx.comm.size() - 1);
}

}  // namespace tdist::coll::detail
