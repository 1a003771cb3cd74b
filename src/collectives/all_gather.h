// all_gatherv: every rank ends with every rank's block, back to back in rank order.
//
// Algorithms (selection.h): kRing, pipelined in chunks: at step s rank r forwards block
// r-s to the next rank, chunk by chunk as the chunks of it arrive. Every receive lands
// in `recv` directly (no scratch). kHierarchical (groups spanning hosts, hierarchy.h):
// equal hosts: all-gather among the ranks with the same local index (one per host), then
// inside each host; unequal hosts: inside each host, among the leaders, then a broadcast
// inside each host. It gathers in scratch (the whole result) and copies to `recv`.
//
// Buffers: rank r's `send` holds bytes_per_rank[r] bytes; `recv` holds the sum of
// bytes_per_rank, block i at the sum of the sizes before it. In place when send is
// `recv` plus the offset of the rank's own block. bytes_per_rank must be the same on
// every rank (zero sizes allowed). Blocks the calling thread. Failure: throws what the
// transport reports (PeerError, TimeoutError at ctx.deadline, DesyncError); the Comm is
// then aborted. InvalidArgument (wrong number of sizes, unusable algorithm) before
// anything is sent.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/context.h"
#include "collectives/selection.h"

namespace tdist::coll {

void all_gatherv(const Ctx& ctx, const void* send, void* recv,
                 std::span<const size_t> bytes_per_rank, Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
