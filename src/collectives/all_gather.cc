// all_gatherv (all_gather.h): pipelined ring.
#include "collectives/all_gather.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/detail.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

using detail::mod;
using detail::RequestQueue;
using detail::Span;

// Step s (0 <= s < n-1): send block r-s to next, receive block r-s-1 from prev. Every
// receive is posted up front (they land in distinct parts of `recv`); the chunks of
// block r-s are sent as those of step s-1's receive complete.
void ring(const Ctx& ctx, void* recv, std::span<const size_t> sizes,
          const std::vector<size_t>& offsets) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const size_t chunk = detail::chunk_bytes(ctx);
  RequestQueue recvs(ctx);
  RequestQueue sends(ctx);
  for (int s = 0; s + 1 < n; ++s) {
    const int b = mod(r - s - 1, n);
    const uint64_t t = detail::tag(ctx, static_cast<uint32_t>(s));
    for (size_t c = 0; c < detail::ceil_div(sizes[b], chunk); ++c) {
      const Span sp = detail::chunk_of(sizes[b], chunk, c);
      recvs.push(ctx.comm.irecv(prev, t, detail::at(recv, offsets[b] + sp.offset), sp.length));
    }
  }
  for (int s = 0; s + 1 < n; ++s) {
    const int b = mod(r - s, n);
    const uint64_t t = detail::tag(ctx, static_cast<uint32_t>(s));
    for (size_t c = 0; c < detail::ceil_div(sizes[b], chunk); ++c) {
      if (s > 0) recvs.wait_front();  // chunk c of block b, received at step s-1
      const Span sp = detail::chunk_of(sizes[b], chunk, c);
      sends.push(ctx.comm.isend(next, t, detail::at(recv, offsets[b] + sp.offset), sp.length));
    }
  }
  recvs.wait_all();
  sends.wait_all();
}

}  // namespace

void all_gatherv(const Ctx& ctx, const void* send, void* recv,
                 std::span<const size_t> bytes_per_rank, Algorithm algo) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  TDIST_CHECK(bytes_per_rank.size() == static_cast<size_t>(n), InvalidArgument,
              "all_gather: expected ", n, " block sizes (one per rank), found ",
              bytes_per_rank.size());
  std::vector<size_t> offsets(n + 1, 0);
  size_t largest = 0;
  for (int i = 0; i < n; ++i) {
    offsets[i + 1] = offsets[i] + bytes_per_rank[i];
    largest = std::max(largest, bytes_per_rank[i]);
  }
  detail::choose(ctx, Collective::kAllGather, largest, algo);
  uint8_t* own = detail::at(recv, offsets[r]);
  if (send != own && bytes_per_rank[r] > 0) std::memmove(own, send, bytes_per_rank[r]);
  if (n == 1 || offsets[n] == 0) return;
  ring(ctx, recv, bytes_per_rank, offsets);
}

}  // namespace tdist::coll
