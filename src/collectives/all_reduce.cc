// all_reduce algorithms (all_reduce.h): pipelined ring, halving-doubling, recursive
// doubling, and the two-rank exchange that ring and halving-doubling become for two
// ranks. All but the out-of-place form of the latter work in place on `recv` after
// prepare_local() copied and premultiplied the rank's own contribution. Slots: one
// exchange through shared memory, reduced from there. Hierarchical:
// phases of the others (and of reduce_scatter, all_gather, reduce, broadcast) on views.
#include "collectives/all_reduce.h"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <vector>

#include "collectives/all_gather.h"
#include "collectives/broadcast.h"
#include "collectives/detail.h"
#include "collectives/hierarchy.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "core/reduce_kernels.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using detail::at;
using detail::Blocks;
using detail::chunk_of;
using detail::mod;
using detail::RequestQueue;
using detail::Span;

struct Vec {
  uint8_t* data;
  size_t count;
  DType dtype;
  ReduceOp op;
  size_t esize() const { return dtype_size(dtype); }
};

// Ring: 2(n-1) steps. Step s < n-1 (reduce-scatter) sends block r-s and folds block
// r-s-1 from prev into `recv`; after it rank r owns block r+1. Step n-1+t (all-gather)
// sends block r+1-t and receives block r-t straight into `recv`. Each step moves its
// block in chunks; unit u = step * chunks + chunk runs in order, with the receives of
// the next kPipelineDepth units posted ahead and sends left in flight.
void ring(const Ctx& ctx, const Vec& v) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const size_t es = v.esize();
  const Blocks blocks{v.count, n};
  const size_t ce = detail::chunk_elems(ctx, es);
  const size_t slot_elems = std::min(ce, blocks.length(0));
  const size_t nch = detail::ceil_div(blocks.length(0), ce);
  const size_t rs_steps = static_cast<size_t>(n - 1);
  const size_t units = 2 * rs_steps * nch;
  auto send_block = [&](size_t s) {
    return s < rs_steps ? mod(r - static_cast<int64_t>(s), n)
                        : mod(r + 1 - static_cast<int64_t>(s - rs_steps), n);
  };
  auto recv_block = [&](size_t s) {
    return s < rs_steps ? mod(r - 1 - static_cast<int64_t>(s), n)
                        : mod(r - static_cast<int64_t>(s - rs_steps), n);
  };
  auto region = [&](int block, size_t c) {
    Span sp = chunk_of(blocks.length(block), ce, c);
    sp.offset += blocks.offset(block);
    return sp;
  };

  detail::Scratch scratch(ctx, detail::kPipelineDepth * slot_elems * es);
  RequestQueue sends(ctx);
  RequestQueue recvs(ctx);
  size_t posted = 0;
  auto post_recvs_before = [&](size_t limit, size_t current) {
    for (; posted < std::min(limit, units); ++posted) {
      const size_t s = posted / nch;
      const Span sp = region(recv_block(s), posted % nch);
      if (sp.length == 0) continue;
      uint8_t* dst;
      if (s < rs_steps) {
        dst = scratch.data() + (posted % detail::kPipelineDepth) * slot_elems * es;
      } else {
        // The all-gather lands where unit `src` (reduce-scatter step s-(n-1)) reduced
        // into and then sent from: post it only once that send was posted and is done.
        const size_t src = (s - rs_steps) * nch + posted % nch;
        if (src > current) break;
        sends.wait_through(src);
        dst = v.data + sp.offset * es;
      }
      recvs.push(
          detail::irecv(ctx, prev, detail::tag(ctx, static_cast<uint32_t>(s)), dst, sp.length * es),
          posted);
    }
  };

  for (size_t u = 0; u < units; ++u) {
    const size_t s = u / nch;
    const size_t c = u % nch;
    const Span out = region(send_block(s), c);
    if (out.length > 0) {
      sends.push(detail::isend(ctx, next, detail::tag(ctx, static_cast<uint32_t>(s)),
                               v.data + out.offset * es, out.length * es),
                 u);
    }
    while (sends.size() > 2 * detail::kPipelineDepth) sends.wait_front();
    post_recvs_before(u + detail::kPipelineDepth, u);
    const Span in = region(recv_block(s), c);
    if (in.length == 0) continue;
    recvs.wait_front();
    if (s < rs_steps) {
      uint8_t* dst = v.data + in.offset * es;
      detail::reduce_into(ctx, dst, scratch.data() + (u % detail::kPipelineDepth) * slot_elems * es,
                          in.length, v.dtype, v.op);
      if (s + 1 == rs_steps) detail::finish(ctx, dst, in.length, v.dtype, v.op, n);
    }
  }
  sends.wait_all();
}

// Two ranks (what ring and halving-doubling both become): rank r reduces block r of the
// two-block split and sends it back. Phase 1 sends the peer's block of this rank's
// contribution and receives the peer's contribution to block r into kPipelineDepth chunks
// of scratch, small enough to stay in the cache, folding each into recv as op(send,
// scratch); phase 2 sends each chunk of block r as soon as it is reduced and receives the
// peer's block straight into recv. `send` is read where it is: out of place nothing is
// copied into recv first. In place, phase 2's receive of a chunk is posted only once phase
// 1's send of that region is done (the peer's reduced chunk cannot arrive before it
// anyway). Receiving phase 1 straight into recv instead, and reducing there, wrote recv
// twice and read it back from memory: 1.3-2x slower from 16 MiB over shm and tcp
// (docs/performance.md, issue 35).
void pair(const Ctx& ctx, const uint8_t* send, const Vec& v) {
  const int r = ctx.comm.rank();
  const int peer = 1 - r;
  const bool in_place = send == v.data;
  const size_t es = v.esize();
  const Blocks blocks{v.count, 2};
  const size_t mine = blocks.offset(r);
  const size_t mine_len = blocks.length(r);
  const size_t theirs = blocks.offset(peer);
  const size_t theirs_len = blocks.length(peer);
  const size_t ce = detail::chunk_elems(ctx, es);
  const size_t mch = detail::ceil_div(mine_len, ce);
  const size_t tch = detail::ceil_div(theirs_len, ce);
  const uint64_t t_reduce = detail::tag(ctx, 0);
  const uint64_t t_gather = detail::tag(ctx, 1);
  constexpr size_t ahead = detail::kPipelineDepth;  // requests posted ahead of the reduction
  const size_t slot_elems = std::min(ce, mine_len);
  detail::Scratch scratch(ctx, std::min(ahead, mch) * slot_elems * es);
  auto slot = [&](size_t c) { return scratch.data() + (c % ahead) * slot_elems * es; };

  RequestQueue sends(ctx);    // phase 1, key = chunk of their block
  RequestQueue reduced(ctx);  // phase 1 receives, key = chunk of my block
  RequestQueue gathers(ctx);  // phase 2 receives, key = chunk of their block
  RequestQueue returns(ctx);  // phase 2 sends
  size_t sent = 0;
  size_t posted = 0;
  size_t gather_posted = 0;
  auto post_sends = [&](size_t limit) {
    for (; sent < std::min(limit, tch); ++sent) {
      const Span sp = chunk_of(theirs_len, ce, sent);
      sends.push(
          detail::isend(ctx, peer, t_reduce, send + (theirs + sp.offset) * es, sp.length * es),
          sent);
    }
  };
  auto post_gathers = [&](size_t limit) {
    for (; gather_posted < std::min(limit, tch); ++gather_posted) {
      const Span sp = chunk_of(theirs_len, ce, gather_posted);
      if (in_place) sends.wait_through(gather_posted);  // the region is sent from
      gathers.push(
          detail::irecv(ctx, peer, t_gather, v.data + (theirs + sp.offset) * es, sp.length * es),
          gather_posted);
    }
  };
  auto post_reduced = [&](size_t limit) {
    for (; posted < std::min(limit, mch); ++posted) {
      const Span sp = chunk_of(mine_len, ce, posted);
      reduced.push(detail::irecv(ctx, peer, t_reduce, slot(posted), sp.length * es), posted);
    }
  };

  post_reduced(ahead);
  post_sends(ahead);
  for (size_t c = 0; c < mch; ++c) {
    reduced.wait_front();
    const Span sp = chunk_of(mine_len, ce, c);
    uint8_t* dst = v.data + (mine + sp.offset) * es;
    detail::reduce(ctx, dst, send + (mine + sp.offset) * es, slot(c), sp.length, v.dtype, v.op);
    detail::finish(ctx, dst, sp.length, v.dtype, v.op, 2);
    returns.push(detail::isend(ctx, peer, t_gather, dst, sp.length * es), c);
    post_reduced(c + 1 + ahead);
    post_sends(c + 1 + ahead);
    post_gathers(c + 1);
    while (returns.size() > ahead) returns.wait_front();
  }
  post_sends(tch);
  post_gathers(tch);
  gathers.wait_all();
  sends.wait_all();
  returns.wait_all();
}

// Non-power-of-two worlds: of the first 2*rem ranks (rem = n - 2^k), each even rank
// folds its vector into the odd rank above it and sits out; the rest renumber densely.
struct Folded {
  int p;        // participating ranks, a power of two
  int newrank;  // -1 for a rank that sat out
  int real(int nr) const { return nr < rem ? 2 * nr + 1 : nr + rem; }
  int rem;
};

Folded fold_in(const Ctx& ctx, const Vec& v, uint32_t step) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p;
  Folded f{p, r - rem, rem};
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      detail::exchange_reduce(ctx, r + 1, step, v.data, v.count, nullptr, 0, v.dtype, v.op);
      f.newrank = -1;
    } else {
      detail::exchange_reduce(ctx, r - 1, step, nullptr, 0, v.data, v.count, v.dtype, v.op);
      f.newrank = r / 2;
    }
  }
  return f;
}

// Hands the result back to the ranks that sat out.
void fold_out(const Ctx& ctx, const Vec& v, const Folded& f, uint32_t step) {
  const int r = ctx.comm.rank();
  if (r >= 2 * f.rem) return;
  RequestQueue q(ctx);
  const int peer = r % 2 == 0 ? r + 1 : r - 1;
  const uint64_t t = detail::tag(ctx, step);
  const size_t bytes = v.count * v.esize();
  q.push(r % 2 == 0 ? detail::irecv(ctx, peer, t, v.data, bytes)
                    : detail::isend(ctx, peer, t, v.data, bytes));
  q.wait_all();
}

void halving_doubling(const Ctx& ctx, const Vec& v) {
  const Folded f = fold_in(ctx, v, 0);
  const int rounds = std::countr_zero(static_cast<unsigned>(f.p));
  if (f.newrank >= 0) {
    const size_t es = v.esize();
    const Blocks blocks{v.count, f.p};
    auto offset = [&](int b) { return b < f.p ? blocks.offset(b) : v.count; };
    int lo = 0;
    int hi = f.p;
    uint32_t step = 1;
    for (int mask = f.p / 2; mask >= 1; mask /= 2, ++step) {
      const int peer = f.real(f.newrank ^ mask);
      const int mid = (lo + hi) / 2;
      const bool lower = (f.newrank & mask) == 0;
      const int keep_lo = lower ? lo : mid;
      const int keep_hi = lower ? mid : hi;
      const int give_lo = lower ? mid : lo;
      const int give_hi = lower ? hi : mid;
      detail::exchange_reduce(ctx, peer, step, v.data + offset(give_lo) * es,
                              offset(give_hi) - offset(give_lo), v.data + offset(keep_lo) * es,
                              offset(keep_hi) - offset(keep_lo), v.dtype, v.op);
      lo = keep_lo;
      hi = keep_hi;
    }
    detail::finish(ctx, v.data + offset(lo) * es, offset(hi) - offset(lo), v.dtype, v.op,
                   ctx.comm.size());
    for (int mask = 1; mask < f.p; mask *= 2, ++step) {
      const int peer = f.real(f.newrank ^ mask);
      const int width = hi - lo;
      const int other_lo = (f.newrank & mask) == 0 ? hi : lo - width;
      const int other_hi = other_lo + width;
      RequestQueue q(ctx);
      const uint64_t t = detail::tag(ctx, step);
      q.push(detail::irecv(ctx, peer, t, v.data + offset(other_lo) * es,
                           (offset(other_hi) - offset(other_lo)) * es));
      q.push(detail::isend(ctx, peer, t, v.data + offset(lo) * es, (offset(hi) - offset(lo)) * es));
      q.wait_all();
      lo = std::min(lo, other_lo);
      hi = std::max(hi, other_hi);
    }
  }
  fold_out(ctx, v, f, static_cast<uint32_t>(2 * rounds + 1));
}

void recursive_doubling(const Ctx& ctx, const Vec& v) {
  const Folded f = fold_in(ctx, v, 0);
  const int rounds = std::countr_zero(static_cast<unsigned>(f.p));
  if (f.newrank >= 0) {
    uint32_t step = 1;
    for (int mask = 1; mask < f.p; mask *= 2, ++step) {
      detail::exchange_reduce(ctx, f.real(f.newrank ^ mask), step, v.data, v.count, v.data, v.count,
                              v.dtype, v.op);
    }
    detail::finish(ctx, v.data, v.count, v.dtype, v.op, ctx.comm.size());
  }
  fold_out(ctx, v, f, static_cast<uint32_t>(rounds + 1));
}

// Slots (selection.h): every rank's contribution through shared memory in one exchange
// (Comm::slot_gather), reduced where it lies in rank order, so every rank gets the same
// bits; `recv` may be `send`, since the blocks are copies.
void slots(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.comm.size();
  const size_t bytes = count * dtype_size(dtype);
  std::optional<detail::Scratch> scaled;  // premul_sum's scaled contribution
  if (op.kind == ReduceOpKind::kPremulSum) {
    scaled.emplace(ctx, bytes);
    detail::prepare_local(ctx, send, scaled->data(), count, dtype, op);
    send = scaled->data();
  }
  std::array<const void*, kMaxSlotWorld> blocks{};
  ctx.comm.slot_gather(detail::tag(ctx, 0), send, bytes, blocks.data(), ctx.deadline);
  detail::reduce(ctx, recv, blocks[0], blocks[1], count, dtype, op);
  for (int r = 2; r < n; ++r) detail::reduce_into(ctx, recv, blocks[r], count, dtype, op);
  detail::finish(ctx, recv, count, dtype, op, n);
}

// Hierarchical (hierarchy.h). Bandwidth form, for equal hosts and vectors above
// kHierarchicalShards: reduce-scatter inside the host (local rank i keeps shard i of the
// balanced split), all-reduce of shard i among the ranks with local index i (one per
// host: every inter-host link busy at once, each carrying 1/L of the vector), all-gather
// inside the host. Latency form, for small vectors (2 log2(L) intra-host rounds instead
// of 2(L-1); 32 KiB is where the flat all-reduce also leaves its latency algorithm) and
// for unequal hosts: reduce to the host's leader, all-reduce among the leaders,
// broadcast from the leader. Either way every rank ends with the same bits.
// A large vector in the bandwidth form goes in segments (up to kMaxSegments, each of at
// least kSegmentChunks chunks per local rank), overlapped by run_overlapped: segment k
// crosses hosts while k+1 is reduce-scattered and k-1 all-gathered inside the host, so
// neither the network nor the host's memory waits for the other (host memory only).
constexpr size_t kHierarchicalShards = 32 * 1024;
constexpr size_t kMaxSegments = 8;
constexpr size_t kSegmentChunks = 4;

size_t segments_for(const Ctx& ctx, size_t count, size_t es, int local_size) {
  if (ctx.memory != MemoryKind::kHost) return 1;
  const size_t segment_bytes = detail::chunk_bytes(ctx) * kSegmentChunks * local_size;
  return std::clamp<size_t>(count * es / segment_bytes, 1, kMaxSegments);
}

// The bandwidth form on segment `seg` of the vector (offsets in elements): reduce-scatter
// inside the host, all_reduce of this rank's shard with its column, all-gather.
struct ShardedSegments {
  const Ctx& ctx;
  const detail::Hosts& hosts;
  const void* send;
  void* recv;
  DType dtype;
  ReduceOp op;
  Blocks segments;
  detail::SubComm intra{ctx.comm, hosts.mine(), 1};
  detail::SubComm inter{ctx.comm, hosts.column(hosts.local), 2};
  detail::SubComm gather{ctx.comm, hosts.mine(), 3};

  size_t es() const { return dtype_size(dtype); }
  Blocks shards(size_t seg) const {
    return Blocks{segments.length(static_cast<int>(seg)), static_cast<int>(hosts.mine().size())};
  }
  uint8_t* shard(size_t seg) const {
    return at(recv,
              (segments.offset(static_cast<int>(seg)) + shards(seg).offset(hosts.local)) * es());
  }
  void reduce_inside(size_t seg) {
    reduce_scatter_balanced(
        detail::phase_ctx(ctx, intra), at(send, segments.offset(static_cast<int>(seg)) * es()),
        shard(seg), segments.length(static_cast<int>(seg)), dtype, detail::first_phase_op(op));
  }
  void cross_hosts(size_t seg) {
    const size_t length = shards(seg).length(hosts.local);
    all_reduce(detail::phase_ctx(ctx, inter), shard(seg), shard(seg), length, dtype,
               detail::later_phase_op(op));
    detail::finish(ctx, shard(seg), length, dtype, op, ctx.comm.size());
  }
  void gather_inside(size_t seg) {
    const Blocks b = shards(seg);
    std::vector<size_t> bytes(static_cast<size_t>(b.parts));
    for (int i = 0; i < b.parts; ++i) bytes[static_cast<size_t>(i)] = b.length(i) * es();
    all_gatherv(detail::phase_ctx(ctx, gather), shard(seg),
                at(recv, segments.offset(static_cast<int>(seg)) * es()), bytes);
  }
};

void hierarchical(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                  ReduceOp op) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  const int n = ctx.comm.size();
  const size_t es = dtype_size(dtype);
  const std::vector<int>& mine = hosts.mine();
  const int local_size = static_cast<int>(mine.size());
  if (hosts.uniform && local_size > 1 && count * es > kHierarchicalShards &&
      count >= static_cast<size_t>(local_size)) {
    const size_t nseg = segments_for(ctx, count, es, local_size);
    ShardedSegments s{ctx, hosts, send, recv, dtype, op, Blocks{count, static_cast<int>(nseg)}};
    if (nseg == 1) {
      s.reduce_inside(0);
      s.cross_hosts(0);
      s.gather_inside(0);
    } else {
      detail::run_overlapped(
          ctx.comm, ctx.helper, nseg, [&](size_t k) { s.reduce_inside(k); },
          [&](size_t k) { s.cross_hosts(k); }, [&](size_t k) { s.gather_inside(k); });
    }
    return;
  }
  const bool leader = hosts.local == 0;
  detail::SubComm intra(ctx.comm, mine, 1);
  reduce(detail::phase_ctx(ctx, intra), send, leader ? recv : nullptr, count, dtype,
         detail::first_phase_op(op), 0);
  if (leader) {
    detail::SubComm leaders(ctx.comm, hosts.column(0), 2);
    all_reduce(detail::phase_ctx(ctx, leaders), recv, recv, count, dtype,
               detail::later_phase_op(op));
    detail::finish(ctx, recv, count, dtype, op, n);
  }
  detail::SubComm release(ctx.comm, mine, 3);
  broadcast(detail::phase_ctx(ctx, release), recv, count * es, 0);
}

}  // namespace

void all_reduce(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                ReduceOp op, Algorithm algo) {
  validate(op, dtype);
  const int n = ctx.comm.size();
  const Algorithm chosen =
      detail::choose(ctx, Collective::kAllReduce, count * dtype_size(dtype), algo);
  if (chosen == Algorithm::kSlots && n > 1) {
    slots(ctx, send, recv, count, dtype, op);
    return;
  }
  if (chosen == Algorithm::kHierarchical) {
    if (count > 0) hierarchical(ctx, send, recv, count, dtype, op);
    return;
  }
  const Vec v{static_cast<uint8_t*>(recv), count, dtype, op};
  if (n == 2 && count > 0 && chosen != Algorithm::kRecursiveDoubling) {
    // Ring and halving-doubling are the same exchange for two ranks. Without a
    // premultiply, `send` is read where it is and never copied into `recv`.
    if (op.kind == ReduceOpKind::kPremulSum || send == recv) {
      detail::prepare_local(ctx, send, recv, count, dtype, op);
      pair(ctx, v.data, v);
    } else {
      pair(ctx, static_cast<const uint8_t*>(send), v);
    }
    return;
  }
  detail::prepare_local(ctx, send, recv, count, dtype, op);
  if (n == 1) {
    detail::finish(ctx, recv, count, dtype, op, 1);
    return;
  }
  if (count == 0) return;
  switch (chosen) {
    case Algorithm::kHalvingDoubling:
      halving_doubling(ctx, v);
      break;
    case Algorithm::kRecursiveDoubling:
      recursive_doubling(ctx, v);
      break;
    default:
      ring(ctx, v);
      break;
  }
}

}  // namespace tdist::coll
