// reduce_scatter (reduce_scatter.h): pipelined ring.
#include "collectives/reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include "collectives/detail.h"
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
void ring(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const size_t es = dtype_size(dtype);
  const size_t ce = detail::chunk_elems(ctx, es);
  const size_t slot = std::min(ce, count) * es;
  const size_t nch = detail::ceil_div(count, ce);
  const size_t depth = detail::kPipelineDepth;
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t units = steps * nch;
  const bool premul = op.kind == ReduceOpKind::kPremulSum;
  auto own = [&](int block, const Span& sp) {
    return detail::at(send, (static_cast<size_t>(block) * count + sp.offset) * es);
  };
  auto msg_tag = [&](size_t s) { return detail::tag(ctx, static_cast<uint32_t>(s)); };
  detail::Scratch in(depth * slot);
  detail::Scratch out(depth * slot);
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
    const Span sp = detail::chunk_of(count, ce, u % nch);
    if (s == 0) {  // this chunk's first message: the own contribution to block r-1
      const uint8_t* mine = own(mod(r - 1, n), sp);
      size_t key = outs;
      if (premul) {
        uint8_t* o = next_out();
        detail::prepare_local(mine, o, sp.length, dtype, op);
        mine = o;
        key = outs++;
      }
      sends.push(ctx.comm.isend(next, msg_tag(0), mine, sp.length * es), key);
    }
    for (; posted < std::min(units, u + depth); ++posted) {
      const Span ps = detail::chunk_of(count, ce, posted % nch);
      recvs.push(ctx.comm.irecv(prev, msg_tag(posted / nch), in.data() + (posted % depth) * slot,
                                ps.length * es));
    }
    recvs.wait_front();
    const uint8_t* got = in.data() + (u % depth) * slot;
    const uint8_t* mine = own(mod(r - static_cast<int64_t>(s) - 2, n), sp);
    const bool last = s + 1 == steps;
    uint8_t* dst = last ? detail::at(recv, sp.offset * es) : next_out();
    if (premul) {
      if (dst != mine) std::memcpy(dst, mine, sp.length * es);
      core::premultiply(dst, sp.length, dtype, op);
      core::reduce_into(dst, got, sp.length, dtype, op);
    } else {
      core::reduce(dst, mine, got, sp.length, dtype, op);
    }
    if (last) {
      core::finish(dst, sp.length, dtype, op, n);
    } else {
      sends.push(ctx.comm.isend(next, msg_tag(s + 1), dst, sp.length * es), outs++);
    }
  }
  sends.wait_all();
}

}  // namespace

void reduce_scatter(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                    ReduceOp op, Algorithm algo) {
  validate(op, dtype);
  const int n = ctx.comm.size();
  detail::choose(ctx, Collective::kReduceScatter, count * dtype_size(dtype), algo);
  if (count == 0) return;
  if (n == 1) {
    detail::prepare_local(send, recv, count, dtype, op);
    core::finish(recv, count, dtype, op, 1);
    return;
  }
  ring(ctx, send, recv, count, dtype, op);
}

}  // namespace tdist::coll
