// reduce_scatter (reduce_scatter.h): pipelined ring, hierarchical.
#include "collectives/reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "collectives/all_reduce.h"
#include "collectives/detail.h"
#include "collectives/gather_scatter.h"
#include "collectives/hierarchy.h"
#include "collectives/reduce.h"
#include "core/reduce_kernels.h"

namespace tdist::coll {
namespace {

using detail::mod;
using detail::RequestQueue;
using detail::Span;

// Message (s, c) carries the partial of chunk c of block r-s-1: at s = 0 the rank's own
// (premultiplied) contribution, later what unit (s-1, c) computed. Unit (s, c) receives
// the partial of block r-s-2 into an input slot and folds the rank's own contribution
// in: into an output slot that becomes message (s+1, c), or at the last step into recv.
// Blocks may differ by one element (the balanced split): every block runs as many chunks
// as block 0, the largest, and a chunk past a block's end is a zero-byte message.
void ring(const Ctx& ctx, const void* send, void* recv, const detail::Blocks& blocks, DType dtype,
          ReduceOp op) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const size_t es = dtype_size(dtype);
  const size_t ce = detail::chunk_elems(ctx, es);
  const size_t slot = std::min(ce, blocks.length(0)) * es;
  const size_t nch = detail::ceil_div(blocks.length(0), ce);
  const size_t depth = detail::kPipelineDepth;
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t units = steps * nch;
  const bool premul = op.kind == ReduceOpKind::kPremulSum;
  auto own = [&](int block, const Span& sp) {
    return detail::at(send, (blocks.offset(block) + sp.offset) * es);
  };
  // Chunk c of the block that message (s, c) carries (block r-s-1).
  auto span_of = [&](size_t s, size_t c) {
    return detail::chunk_of(blocks.length(mod(r - static_cast<int64_t>(s) - 1, n)), ce, c);
  };
  auto msg_tag = [&](size_t s) { return detail::tag(ctx, static_cast<uint32_t>(s)); };
  detail::Scratch in(ctx, depth * slot);
  // Output slots carry partials to the next rank: none with two ranks (every unit is the
  // last step), unless the own contribution needs a premultiplied copy.
  detail::Scratch out(ctx, steps > 1 || premul ? depth * slot : 0);
  size_t outs = 0;  // output slots used so far; slot k is out[k % depth], its send has key k
  RequestQueue sends(ctx);
  RequestQueue recvs(ctx);
  auto next_out = [&]() {
    if (outs >= depth) sends.wait_through(outs - depth);
    return out.data() + (outs % depth) * slot;
  };
  size_t posted = 0;
  for (size_t u = 0; u < units; ++u) {
    const size_t s = u / nch;
    const size_t c = u % nch;
    if (s == 0) {
      const Span sp =
          span_of(0, c);  // this chunk's first message: the own contribution to block r-1
      const uint8_t* mine = own(mod(r - 1, n), sp);
      size_t key = outs;
      if (premul) {
        uint8_t* o = next_out();
        detail::prepare_local(ctx, mine, o, sp.length, dtype, op);
        mine = o;
        key = outs++;
      }
      sends.push(detail::isend(ctx, next, msg_tag(0), mine, sp.length * es), key);
    }
    for (; posted < std::min(units, u + depth); ++posted) {
      const Span ps = span_of(posted / nch + 1, posted % nch);  // block r-s-2
      recvs.push(detail::irecv(ctx, prev, msg_tag(posted / nch),
                               in.data() + (posted % depth) * slot, ps.length * es));
    }
    recvs.wait_front();
    const Span sp = span_of(s + 1, c);  // block r-s-2
    const uint8_t* got = in.data() + (u % depth) * slot;
    const uint8_t* mine = own(mod(r - static_cast<int64_t>(s) - 2, n), sp);
    const bool last = s + 1 == steps;
    uint8_t* dst = last ? detail::at(recv, sp.offset * es) : next_out();
    if (premul) {
      if (dst != mine) detail::copy(ctx, dst, mine, sp.length * es);
      detail::premultiply(ctx, dst, sp.length, dtype, op);
      detail::reduce_into(ctx, dst, got, sp.length, dtype, op);
    } else {
      detail::reduce(ctx, dst, mine, got, sp.length, dtype, op);
    }
    if (last) {
      detail::finish(ctx, dst, sp.length, dtype, op, n);
    } else {
      sends.push(detail::isend(ctx, next, msg_tag(s + 1), dst, sp.length * es), outs++);
    }
  }
  sends.wait_all();
}

// Flat: the ring over `blocks` (one rank: a copy).
void flat(const Ctx& ctx, const void* send, void* recv, const detail::Blocks& blocks, DType dtype,
          ReduceOp op) {
  const int n = ctx.comm.size();
  if (n == 1) {
    detail::prepare_local(ctx, send, recv, blocks.count, dtype, op);
    detail::finish(ctx, recv, blocks.count, dtype, op, 1);
    return;
  }
  ring(ctx, send, recv, blocks, dtype, op);
}

// Hierarchical (hierarchy.h). Equal hosts: the blocks are copied into scratch column by
// column (the blocks of the ranks with local index 0 on every host, by host, then local
// index 1, ...); a reduce-scatter inside the host leaves local rank i the host's partial
// of column i, and a reduce-scatter among the ranks with local index i (one per host)
// leaves each its own block: across hosts each rank sends (hosts-1)/hosts of a column,
// on all of a host's links at once. Unequal hosts: the host's partial of the whole vector
// is reduced to its leader, the leaders all-reduce it, and each leader scatters its
// host's blocks. Scratch: the whole vector (size * count elements; leaders only when
// unequal).
void hierarchical(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                  ReduceOp op) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  const int n = ctx.comm.size();
  const int num_hosts = hosts.count();
  const size_t block = count * dtype_size(dtype);
  const size_t total = static_cast<size_t>(n) * count;
  const bool leader = hosts.local == 0;
  detail::Scratch all(ctx, hosts.uniform || leader ? static_cast<size_t>(n) * block : 0);
  if (hosts.uniform) {
    const int local_size = static_cast<int>(hosts.mine().size());
    const size_t column_count = count * static_cast<size_t>(num_hosts);
    uint8_t* dst = all.data();
    for (int i = 0; i < local_size; ++i) {
      for (int rank : hosts.column(i)) {
        detail::copy(ctx, dst, detail::at(send, static_cast<size_t>(rank) * block), block);
        dst += block;
      }
    }
    uint8_t* column =
        all.data() + static_cast<size_t>(hosts.local) * column_count * dtype_size(dtype);
    detail::SubComm intra(ctx.comm, hosts.mine(), 1);
    flat(detail::phase_ctx(ctx, intra), all.data(), column, detail::Blocks{total, local_size},
         dtype, detail::first_phase_op(op));
    detail::SubComm inter(ctx.comm, hosts.column(hosts.local), 2);
    flat(detail::phase_ctx(ctx, inter), column, recv, detail::Blocks{column_count, num_hosts},
         dtype, detail::later_phase_op(op));
  } else {
    detail::SubComm intra(ctx.comm, hosts.mine(), 1);
    reduce(detail::phase_ctx(ctx, intra), send, leader ? all.data() : nullptr, total, dtype,
           detail::first_phase_op(op), 0);
    if (leader) {
      detail::SubComm leaders(ctx.comm, hosts.column(0), 2);
      all_reduce(detail::phase_ctx(ctx, leaders), all.data(), all.data(), total, dtype,
                 detail::later_phase_op(op));
      // The host's blocks, in local order, to the front (rank >= local index: no overlap
      // with a block still to be moved).
      for (size_t j = 0; j < hosts.mine().size(); ++j) {
        std::memmove(all.data() + j * block,
                     all.data() + static_cast<size_t>(hosts.mine()[j]) * block, block);
      }
    }
    detail::SubComm release(ctx.comm, hosts.mine(), 3);
    scatter(detail::phase_ctx(ctx, release), leader ? all.data() : nullptr, recv, block, 0);
  }
  detail::finish(ctx, recv, count, dtype, op, n);
}

}  // namespace

void reduce_scatter(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                    ReduceOp op, Algorithm algo) {
  validate(op, dtype);
  const int n = ctx.comm.size();
  const Algorithm chosen =
      detail::choose(ctx, Collective::kReduceScatter, count * dtype_size(dtype), algo);
  if (count == 0) return;
  if (chosen == Algorithm::kHierarchical) {
    hierarchical(ctx, send, recv, count, dtype, op);
  } else {
    flat(ctx, send, recv, detail::Blocks{count * static_cast<size_t>(n), n}, dtype, op);
  }
}

void reduce_scatter_balanced(const Ctx& ctx, const void* send, void* recv, size_t count,
                             DType dtype, ReduceOp op) {
  validate(op, dtype);
  if (count == 0) return;
  flat(ctx, send, recv, detail::Blocks{count, ctx.comm.size()}, dtype, op);
}

}  // namespace tdist::coll
