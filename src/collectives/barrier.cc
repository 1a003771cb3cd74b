// barrier (barrier.h): dissemination over zero-byte messages.
#include "collectives/barrier.h"

#include "collectives/detail.h"

namespace tdist::coll {

void barrier(const Ctx& ctx, Algorithm algo) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  detail::choose(ctx, Collective::kBarrier, 0, algo);
  detail::RequestQueue sends(ctx);
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    const uint64_t t = detail::tag(ctx, round);
    sends.push(ctx.comm.isend(detail::mod(r + dist, n), t, nullptr, 0));
    detail::RequestQueue recv(ctx);
    recv.push(ctx.comm.irecv(detail::mod(r - dist, n), t, nullptr, 0));
    recv.wait_all();
  }
  sends.wait_all();
}

}  // namespace tdist::coll
