// gather and scatter (gather_scatter.h): linear.
#include "collectives/gather_scatter.h"

#include <cstring>

#include "collectives/detail.h"

namespace tdist::coll {

void gather(const Ctx& ctx, const void* send, void* recv, size_t bytes, int root, Algorithm algo) {
  detail::check_root(ctx, "gather", root);
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  detail::choose(ctx, Collective::kGather, bytes, algo);
  if (bytes == 0) return;
  const uint64_t t = detail::tag(ctx, 0);
  detail::RequestQueue q(ctx);
  if (r == root) {
    for (int i = 0; i < n; ++i) {
      if (i != r) q.push(detail::irecv(ctx, i, t, detail::at(recv, i * bytes), bytes));
    }
    uint8_t* own = detail::at(recv, r * bytes);
    if (own != send) std::memmove(own, send, bytes);
  } else {
    q.push(detail::isend(ctx, root, t, send, bytes));
  }
  q.wait_all();
}

void scatter(const Ctx& ctx, const void* send, void* recv, size_t bytes, int root, Algorithm algo) {
  detail::check_root(ctx, "scatter", root);
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  detail::choose(ctx, Collective::kScatter, bytes, algo);
  if (bytes == 0) return;
  const uint64_t t = detail::tag(ctx, 0);
  detail::RequestQueue q(ctx);
  if (r == root) {
    for (int k = 1; k < n; ++k) {  // start with the next rank, spreading the load
      const int i = detail::mod(r + k, n);
      q.push(detail::isend(ctx, i, t, detail::at(send, i * bytes), bytes));
    }
    const uint8_t* own = detail::at(send, r * bytes);
    if (own != recv) std::memmove(recv, own, bytes);
  } else {
    q.push(detail::irecv(ctx, root, t, recv, bytes));
  }
  q.wait_all();
}

}  // namespace tdist::coll
