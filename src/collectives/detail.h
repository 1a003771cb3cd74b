// Internal helpers shared by the collective algorithms (not installed, not used outside
// src/collectives and its tests).
//
// RequestQueue  a FIFO of in-flight requests. Waiting goes through it, so a failed or
//               timed-out wait aborts the Comm before the exception leaves the algorithm:
//               buffers handed to the transport are never abandoned while it may still
//               write them (Comm contract: a pending Request may only be destroyed after
//               the Comm was aborted). A queue destroyed with requests left (an exception
//               unwinding from elsewhere) aborts the Comm too. Its storage is kept per
//               thread for the next queue (no allocation per collective).
// Scratch       an uninitialised byte buffer whose size is counted per thread, so tests
//               can check an algorithm's memory bound (scratch_peak_bytes()). Each thread
//               keeps its largest freed one (up to 16 MiB) for the next.
// Blocks        the balanced split of `count` elements into `parts` blocks (the first
//               count % parts blocks get one extra element).
// exchange_reduce  one pipelined send/receive-and-reduce with a peer through a bounded
//               scratch of kPipelineDepth chunks.
//
// Thread-safety: every object here belongs to one collective call on one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/context.h"
#include "collectives/selection.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "transport/comm.h"

namespace tdist::coll::detail {

// Chunks in flight per pipeline (receive slots of scratch).
inline constexpr size_t kPipelineDepth = 4;
// exchange_reduce receives a single message up to this size on the stack, not in scratch.
inline constexpr size_t kSmallExchangeBytes = 1024;

// The pipeline chunk size in bytes (ctx.settings: TDIST_CHUNK_BYTES, at least 1).
inline size_t chunk_bytes(const Ctx& ctx) { return ctx.settings.chunk_bytes; }
// Elements of `esize` bytes per chunk (at least 1).
inline size_t chunk_elems(const Ctx& ctx, size_t esize) {
  return std::max<size_t>(1, chunk_bytes(ctx) / esize);
}

// select_algorithm() for this Ctx: its world, its Comm's number of hosts and link class,
// its settings. The first choice is stored in ctx.chosen, when the context has one.
inline Algorithm choose(const Ctx& ctx, Collective c, size_t bytes, Algorithm requested) {
  const transport::Topology& topology = ctx.comm.topology();
  const size_t slots = ctx.memory == MemoryKind::kHost ? ctx.comm.slot_bytes() : 0;
  const Algorithm chosen =
      select_algorithm(c, bytes, ctx.comm.size(), topology.num_hosts(), topology.link, requested,
                       ctx.settings.forced(c), slots);
  if (ctx.chosen != nullptr && *ctx.chosen == Algorithm::kAuto) *ctx.chosen = chosen;
  return chosen;
}

constexpr size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
constexpr int mod(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

inline uint8_t* at(void* base, size_t byte_offset) {
  return static_cast<uint8_t*>(base) + byte_offset;
}
inline const uint8_t* at(const void* base, size_t byte_offset) {
  return static_cast<const uint8_t*>(base) + byte_offset;
}

inline uint64_t tag(const Ctx& ctx, uint32_t step) {
  return transport::collective_tag(ctx.seq, step);
}

struct Blocks {
  size_t count;
  int parts;
  size_t length(int b) const {
    return count / parts + (static_cast<size_t>(b) < count % parts ? 1 : 0);
  }
  size_t offset(int b) const {
    const size_t ub = static_cast<size_t>(b);
    return ub * (count / parts) + std::min(ub, count % static_cast<size_t>(parts));
  }
};

// Chunk `c` of a range of `length` elements, chunks of `chunk` elements: {offset, length}
// relative to the range (length 0 past its end).
struct Span {
  size_t offset;
  size_t length;
};
inline Span chunk_of(size_t length, size_t chunk, size_t c) {
  const size_t begin = std::min(length, c * chunk);
  return {begin, std::min(length, begin + chunk) - begin};
}

// The requests an algorithm has in flight, oldest first. The first kInline live in the
// queue itself (a small collective allocates nothing here); more spill to the heap.
class RequestQueue {
 public:
  explicit RequestQueue(const Ctx& ctx) : ctx_(ctx) {}
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Adds a request; keys must not decrease (they name the unit of work it belongs to).
  void push(transport::RequestPtr request, size_t key = 0);
  bool empty() const { return head_ == count_; }
  size_t size() const { return count_ - head_; }
  // Waits for the oldest request and drops it.
  void wait_front();
  // Waits for every request whose key is <= key.
  void wait_through(size_t key);
  void wait_all();

 private:
  static constexpr size_t kInline = 4;
  struct Entry {
    transport::RequestPtr request;
    size_t key = 0;
  };
  Entry& at(size_t i) { return i < kInline ? inline_[i] : spilled_[i - kInline]; }

  const Ctx& ctx_;
  Entry inline_[kInline];
  std::vector<Entry> spilled_;
  size_t head_ = 0;   // the oldest pending entry
  size_t count_ = 0;  // entries pushed since the queue was last empty
};

class Scratch {
 public:
  explicit Scratch(size_t bytes);
  // In the Ctx's memory: device scratch from ctx.device when the buffers are on a device.
  Scratch(const Ctx& ctx, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  uint8_t* data() { return device_data_ != nullptr ? device_data_ : data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  void init_host();

  std::unique_ptr<uint8_t[]> data_;
  size_t bytes_;
  size_t capacity_ = 0;
  DeviceOps* device_ = nullptr;
  uint8_t* device_data_ = nullptr;
};

// The algorithms' access to buffers in the Ctx's memory (context.h): messages, the
// reduction kernels (core/reduce_kernels.h on the host, ctx.device's on a device), copies.
inline transport::RequestPtr isend(const Ctx& ctx, int peer, uint64_t t, const void* data,
                                   size_t bytes) {
  return ctx.comm.isend_on(ctx.memory, peer, t, data, bytes);
}
inline transport::RequestPtr irecv(const Ctx& ctx, int peer, uint64_t t, void* data, size_t bytes) {
  return ctx.comm.irecv_on(ctx.memory, peer, t, data, bytes);
}
void reduce_into(const Ctx& ctx, void* dst, const void* src, size_t count, DType dtype,
                 ReduceOp op);
void reduce(const Ctx& ctx, void* dst, const void* a, const void* b, size_t count, DType dtype,
            ReduceOp op);
void premultiply(const Ctx& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void finish(const Ctx& ctx, void* data, size_t count, DType dtype, ReduceOp op, int world_size);
void copy(const Ctx& ctx, void* dst, const void* src, size_t bytes);

// Peak bytes of Scratch alive at once on this thread since the last reset (tests).
size_t scratch_peak_bytes();
void reset_scratch_peak();

// Sends `send_count` elements at `send` to `peer` and receives `recv_count` elements from
// it, folded into `dst` (dst = op(dst, received)), both in chunks of chunk_elems(),
// through at most kPipelineDepth chunks of scratch. `send` may be exactly `dst` (then
// each chunk's send completes before that chunk is reduced); otherwise the two ranges
// must not overlap. The peer calls it with the counts swapped. Tag: tag(ctx, step).
void exchange_reduce(const Ctx& ctx, int peer, uint32_t step, const void* send, size_t send_count,
                     void* dst, size_t recv_count, DType dtype, ReduceOp op);

// Copies `count` elements from `send` to `recv` (unless they are the same) and applies
// premul_sum's scale to the copy: a rank's own contribution, ready to be reduced.
void prepare_local(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                   ReduceOp op);

// Throws InvalidArgument unless 0 <= root < size.
void check_root(const Ctx& ctx, const char* op, int root);

}  // namespace tdist::coll::detail
