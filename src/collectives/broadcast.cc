// broadcast algorithms (broadcast.h): binomial tree, pipelined chain, hierarchical.
#include "collectives/broadcast.h"

#include <algorithm>
#include <vector>

#include "collectives/detail.h"
#include "collectives/hierarchy.h"

namespace tdist::coll {
namespace {

using detail::mod;
using detail::RequestQueue;

// Ranks are renumbered relative to the root (vr = r - root). Rank vr receives from
// vr minus its lowest set bit, then sends to vr + 2^k for every 2^k below that bit.
void binomial(const Ctx& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.comm.size();
  const int vr = mod(ctx.comm.rank() - root, n);
  const uint64_t t = detail::tag(ctx, 0);
  int mask = 1;
  while (mask < n) {
    if ((vr & mask) != 0) {
      RequestQueue q(ctx);
      q.push(detail::irecv(ctx, mod(vr - mask + root, n), t, data, bytes));
      q.wait_all();
      break;
    }
    mask <<= 1;
  }
  RequestQueue sends(ctx);
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) sends.push(detail::isend(ctx, mod(vr + mask + root, n), t, data, bytes));
  }
  sends.wait_all();
}

// Chunk c travels root -> vr 1 -> ... -> vr n-1; each rank posts the receives of every
// chunk up front (they land in place, so nothing is buffered however far ahead the
// sender runs) and forwards a chunk as soon as it lands.
void chain(const Ctx& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.comm.size();
  const int vr = mod(ctx.comm.rank() - root, n);
  const int prev = vr > 0 ? mod(ctx.comm.rank() - 1, n) : -1;
  const int next = vr + 1 < n ? mod(ctx.comm.rank() + 1, n) : -1;
  const size_t chunk = detail::chunk_bytes(ctx);
  const size_t nch = detail::ceil_div(bytes, chunk);
  const uint64_t t = detail::tag(ctx, 0);
  RequestQueue sends(ctx);
  RequestQueue recvs(ctx);
  if (prev >= 0) {
    for (size_t c = 0; c < nch; ++c) {
      const detail::Span ps = detail::chunk_of(bytes, chunk, c);
      recvs.push(detail::irecv(ctx, prev, t, detail::at(data, ps.offset), ps.length));
    }
  }
  for (size_t c = 0; c < nch; ++c) {
    const detail::Span sp = detail::chunk_of(bytes, chunk, c);
    if (prev >= 0) recvs.wait_front();
    if (next >= 0) {
      sends.push(detail::isend(ctx, next, t, detail::at(data, sp.offset), sp.length));
      while (sends.size() > 2 * detail::kPipelineDepth) sends.wait_front();
    }
  }
  sends.wait_all();
}

// Hierarchical (hierarchy.h): the root broadcasts to one rank per host (the leader, the
// root itself on its host), then each of those to its host's ranks.
void hierarchical(const Ctx& ctx, void* data, size_t bytes, int root) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  const std::vector<int> reps = hosts.representatives(root);
  const int rep = reps[static_cast<size_t>(hosts.host)];
  if (rep == ctx.comm.rank()) {
    detail::SubComm inter(ctx.comm, reps, 1);
    broadcast(detail::phase_ctx(ctx, inter), data, bytes, hosts.host_of(root));
  }
  detail::SubComm intra(ctx.comm, hosts.mine(), 2);
  broadcast(detail::phase_ctx(ctx, intra), data, bytes, hosts.local_of(rep));
}

}  // namespace

void broadcast(const Ctx& ctx, void* data, size_t bytes, int root, Algorithm algo) {
  detail::check_root(ctx, "broadcast", root);
  const int n = ctx.comm.size();
  const Algorithm chosen = detail::choose(ctx, Collective::kBroadcast, bytes, algo);
  if (n == 1 || bytes == 0) return;
  if (chosen == Algorithm::kHierarchical) {
    hierarchical(ctx, data, bytes, root);
  } else if (chosen == Algorithm::kChain) {
    chain(ctx, data, bytes, root);
  } else {
    binomial(ctx, data, bytes, root);
  }
}

}  // namespace tdist::coll
