// reduce algorithms (reduce.h): binomial tree, pipelined chain, hierarchical.
#include "collectives/reduce.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "collectives/detail.h"
#include "collectives/hierarchy.h"
#include "core/reduce_kernels.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using detail::mod;
using detail::RequestQueue;
using detail::Span;

struct Args {
  const void* send;
  void* recv;
  size_t count;
  DType dtype;
  ReduceOp op;
  int root;
};

// Ranks relative to the root (vr = r - root): at round 2^k, a rank with bit k set sends
// its partial to vr - 2^k and is done; the others fold in the partial of vr + 2^k.
void binomial(const Ctx& ctx, const Args& a) {
  const int n = ctx.comm.size();
  const int vr = mod(ctx.comm.rank() - a.root, n);
  const size_t es = dtype_size(a.dtype);
  std::optional<detail::Scratch> own;
  void* acc = a.recv;
  if (vr != 0) {
    own.emplace(ctx, a.count * es);
    acc = own->data();
  }
  detail::prepare_local(ctx, a.send, acc, a.count, a.dtype, a.op);
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vr & mask) != 0) {
      detail::exchange_reduce(ctx, mod(vr - mask + a.root, n), 0, acc, a.count, nullptr, 0, a.dtype,
                              a.op);
      return;
    }
    if (vr + mask < n) {
      detail::exchange_reduce(ctx, mod(vr + mask + a.root, n), 0, nullptr, 0, acc, a.count, a.dtype,
                              a.op);
    }
  }
  detail::finish(ctx, acc, a.count, a.dtype, a.op, n);
}

// Chunk c flows from vr n-1 down to the root; every rank receives the partial chunk from
// vr+1 into an input slot, folds its own chunk in (into an output slot, or into `recv`
// on the root) and passes it on to vr-1.
void chain(const Ctx& ctx, const Args& a) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int vr = mod(r - a.root, n);
  const int from = vr + 1 < n ? mod(r + 1, n) : -1;
  const int to = vr > 0 ? mod(r - 1, n) : -1;
  const size_t es = dtype_size(a.dtype);
  const size_t ce = detail::chunk_elems(ctx, es);
  const size_t slot = std::min(ce, a.count) * es;
  const size_t nch = detail::ceil_div(a.count, ce);
  const bool premul = a.op.kind == ReduceOpKind::kPremulSum;
  const uint64_t t = detail::tag(ctx, 0);
  const size_t depth = detail::kPipelineDepth;
  detail::Scratch in(ctx, from >= 0 ? depth * slot : 0);
  detail::Scratch out(ctx, to >= 0 && (from >= 0 || premul) ? depth * slot : 0);
  RequestQueue sends(ctx);
  RequestQueue recvs(ctx);
  size_t posted = 0;
  for (size_t c = 0; c < nch; ++c) {
    const Span sp = detail::chunk_of(a.count, ce, c);
    const uint8_t* mine = detail::at(a.send, sp.offset * es);
    uint8_t* dst = to < 0 ? detail::at(a.recv, sp.offset * es) : out.data() + (c % depth) * slot;
    if (to >= 0 && c >= depth) sends.wait_through(c - depth);  // frees dst's slot
    const void* result = mine;
    if (from >= 0) {
      for (; posted < std::min(nch, c + depth); ++posted) {
        const Span ps = detail::chunk_of(a.count, ce, posted);
        recvs.push(
            detail::irecv(ctx, from, t, in.data() + (posted % depth) * slot, ps.length * es));
      }
      recvs.wait_front();
      const uint8_t* got = in.data() + (c % depth) * slot;
      if (premul) {
        if (dst != mine) detail::copy(ctx, dst, mine, sp.length * es);
        detail::premultiply(ctx, dst, sp.length, a.dtype, a.op);
        detail::reduce_into(ctx, dst, got, sp.length, a.dtype, a.op);
      } else {
        detail::reduce(ctx, dst, mine, got, sp.length, a.dtype, a.op);
      }
      result = dst;
    } else if (premul || to < 0) {
      detail::prepare_local(ctx, mine, dst, sp.length, a.dtype, a.op);
      result = dst;
    }
    if (to >= 0) {
      sends.push(detail::isend(ctx, to, t, result, sp.length * es), c);
    } else {
      detail::finish(ctx, dst, sp.length, a.dtype, a.op, n);
    }
  }
  sends.wait_all();
}

// Hierarchical (hierarchy.h): each host reduces to one of its ranks (the leader, the
// root itself on its host), then those reduce to the root. Scratch: a full-size partial
// on the leaders other than the root.
void hierarchical(const Ctx& ctx, const Args& a) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  const std::vector<int> reps = hosts.representatives(a.root);
  const int r = ctx.comm.rank();
  const bool is_rep = reps[static_cast<size_t>(hosts.host)] == r;
  std::optional<detail::Scratch> own;
  void* acc = a.recv;
  if (is_rep && r != a.root) {
    own.emplace(ctx, a.count * dtype_size(a.dtype));
    acc = own->data();
  }
  detail::SubComm intra(ctx.comm, hosts.mine(), 1);
  reduce(detail::phase_ctx(ctx, intra), a.send, is_rep ? acc : nullptr, a.count, a.dtype,
         detail::first_phase_op(a.op), hosts.local_of(reps[static_cast<size_t>(hosts.host)]));
  if (!is_rep) return;
  detail::SubComm inter(ctx.comm, reps, 2);
  reduce(detail::phase_ctx(ctx, inter), acc, r == a.root ? acc : nullptr, a.count, a.dtype,
         detail::later_phase_op(a.op), hosts.host_of(a.root));
  if (r == a.root) detail::finish(ctx, a.recv, a.count, a.dtype, a.op, ctx.comm.size());
}

}  // namespace

void reduce(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
            int root, Algorithm algo) {
  validate(op, dtype);
  detail::check_root(ctx, "reduce", root);
  const int n = ctx.comm.size();
  const Algorithm chosen =
      detail::choose(ctx, Collective::kReduce, count * dtype_size(dtype), algo);
  TDIST_CHECK(ctx.comm.rank() != root || recv != nullptr || count == 0, InvalidArgument,
              "reduce: the root needs a receive buffer");
  if (count == 0) return;
  const Args a{send, recv, count, dtype, op, root};
  if (n == 1) {
    detail::prepare_local(ctx, send, recv, count, dtype, op);
    detail::finish(ctx, recv, count, dtype, op, 1);
  } else if (chosen == Algorithm::kHierarchical) {
    hierarchical(ctx, a);
  } else if (chosen == Algorithm::kChain) {
    chain(ctx, a);
  } else {
    binomial(ctx, a);
  }
}

}  // namespace tdist::coll
