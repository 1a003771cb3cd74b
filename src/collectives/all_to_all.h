// all_to_allv: every rank sends block j of its `send` to rank j, and receives rank i's
// block for it into block i of its `recv`.
//
// Algorithm (selection.h): kPairwise: every receive is posted up front, then at step k
// (1 <= k < n) rank r sends to r+k, so at each step every rank sends to a different
// peer. No scratch.
//
// Buffers: `send` holds the blocks of send_bytes back to back in rank order, `recv`
// those of recv_bytes. recv_bytes[i] on rank j must equal send_bytes[j] on rank i (the
// transport reports a mismatch as DesyncError); zero sizes are allowed. `send` and
// `recv` must not overlap. Blocks the calling thread. Failure: throws what the transport
// reports (PeerError, TimeoutError at ctx.deadline, DesyncError); the Comm is then
// aborted. InvalidArgument (wrong number of sizes, own block sizes that differ, unusable
// algorithm) before anything is sent.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/context.h"
#include "collectives/selection.h"

namespace tdist::coll {

void all_to_allv(const Ctx& ctx, const void* send, std::span<const size_t> send_bytes, void* recv,
                 std::span<const size_t> recv_bytes, Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
