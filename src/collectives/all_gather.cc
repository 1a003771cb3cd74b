// all_gatherv (all_gather.h): pipelined ring, hierarchical.
#include "collectives/all_gather.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "collectives/broadcast.h"
#include "collectives/detail.h"
#include "collectives/hierarchy.h"
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
      recvs.push(detail::irecv(ctx, prev, t, detail::at(recv, offsets[b] + sp.offset), sp.length));
    }
  }
  for (int s = 0; s + 1 < n; ++s) {
    const int b = mod(r - s, n);
    const uint64_t t = detail::tag(ctx, static_cast<uint32_t>(s));
    for (size_t c = 0; c < detail::ceil_div(sizes[b], chunk); ++c) {
      if (s > 0) recvs.wait_front();  // chunk c of block b, received at step s-1
      const Span sp = detail::chunk_of(sizes[b], chunk, c);
      sends.push(detail::isend(ctx, next, t, detail::at(recv, offsets[b] + sp.offset), sp.length));
    }
  }
  recvs.wait_all();
  sends.wait_all();
}

// Hierarchical (hierarchy.h): the blocks gather in scratch in groups, then are copied to
// `recv` in rank order. Equal hosts: the groups are the columns (the ranks with the same
// local index, one per host): each column all-gathers its blocks across hosts (every
// inter-host link busy at once, each host receiving every other host's blocks once),
// then each host's ranks all-gather their columns. Unequal hosts: the groups are the
// hosts: each host's ranks all-gather their blocks, the leaders all-gather their hosts'
// blocks, and each leader broadcasts the whole to its host. Scratch: the whole result.
void hierarchical(const Ctx& ctx, const void* send, void* recv, std::span<const size_t> sizes,
                  const std::vector<size_t>& offsets) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  std::vector<std::vector<int>> groups;
  if (hosts.uniform) {
    for (size_t i = 0; i < hosts.mine().size(); ++i)
      groups.push_back(hosts.column(static_cast<int>(i)));
  } else {
    groups = hosts.ranks;
  }
  auto sizes_of = [&](const std::vector<int>& ranks) {
    std::vector<size_t> out;
    out.reserve(ranks.size());
    for (int rank : ranks) out.push_back(sizes[static_cast<size_t>(rank)]);
    return out;
  };
  std::vector<size_t> group_bytes;
  std::vector<size_t> group_offset{0};
  for (const auto& g : groups) {
    const std::vector<size_t> s = sizes_of(g);
    group_bytes.push_back(std::accumulate(s.begin(), s.end(), size_t{0}));
    group_offset.push_back(group_offset.back() + group_bytes.back());
  }
  const size_t total = group_offset.back();
  detail::Scratch packed(ctx, total);
  // My group: my column, or my host.
  const size_t mine = static_cast<size_t>(hosts.uniform ? hosts.local : hosts.host);
  uint8_t* own_group = packed.data() + group_offset[mine];
  if (hosts.uniform) {
    detail::SubComm inter(ctx.comm, groups[mine], 1);
    all_gatherv(detail::phase_ctx(ctx, inter), send, own_group, sizes_of(groups[mine]));
    detail::SubComm intra(ctx.comm, hosts.mine(), 2);
    all_gatherv(detail::phase_ctx(ctx, intra), own_group, packed.data(), group_bytes);
  } else {
    detail::SubComm intra(ctx.comm, hosts.mine(), 1);
    all_gatherv(detail::phase_ctx(ctx, intra), send, own_group, sizes_of(hosts.mine()));
    if (hosts.local == 0) {
      detail::SubComm leaders(ctx.comm, hosts.column(0), 2);
      all_gatherv(detail::phase_ctx(ctx, leaders), own_group, packed.data(), group_bytes);
    }
    detail::SubComm release(ctx.comm, hosts.mine(), 3);
    broadcast(detail::phase_ctx(ctx, release), packed.data(), total, 0);
  }
  const uint8_t* from = packed.data();
  for (const auto& g : groups) {
    for (int rank : g) {
      const size_t b = sizes[static_cast<size_t>(rank)];
      if (b > 0) detail::copy(ctx, detail::at(recv, offsets[static_cast<size_t>(rank)]), from, b);
      from += b;
    }
  }
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
  const Algorithm chosen = detail::choose(ctx, Collective::kAllGather, largest, algo);
  uint8_t* own = detail::at(recv, offsets[r]);
  if (send != own && bytes_per_rank[r] > 0) std::memmove(own, send, bytes_per_rank[r]);
  if (n == 1 || offsets[n] == 0) return;
  if (chosen == Algorithm::kHierarchical) {
    hierarchical(ctx, own, recv, bytes_per_rank, offsets);
  } else {
    ring(ctx, recv, bytes_per_rank, offsets);
  }
}

}  // namespace tdist::coll
