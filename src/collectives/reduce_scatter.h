// reduce_scatter: rank r ends with block r of op applied element-wise over all ranks'
// vectors.
//
// Algorithms (selection.h): kRing, pipelined in chunks: at step s rank r folds its own
// contribution to block r-s-2 into the partial arriving from the previous rank and
// passes it on; after n-1 steps block r is complete. Scratch: 2 * kPipelineDepth chunks
// (receive slots and outgoing partials) whatever the size and world. kHierarchical
// (groups spanning hosts, hierarchy.h): reduce-scatter inside each host, then among the
// ranks with the same local index (one per host); unequal hosts: reduce to each host's
// leader, all-reduce among leaders, scatter inside each host. Scratch: the whole vector.
//
// Buffers: `send` holds size*count elements (block i = elements [i*count, (i+1)*count))
// and is never written (unless `recv` is the rank's own block of it: in place); `recv`
// holds count elements. premul_sum scales each rank's contribution; avg divides the
// result. Blocks the calling thread. Failure: throws what the transport reports
// (PeerError, TimeoutError at ctx.deadline, DesyncError); the Comm is then aborted.
// InvalidArgument (bad op, unusable algorithm) before anything is sent.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "collectives/selection.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::coll {

void reduce_scatter(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                    ReduceOp op, Algorithm algo = Algorithm::kAuto);

// The ring over the balanced split of `count` elements (detail::Blocks{count, size}: the
// first count % size blocks one element longer): rank r ends with block r at `recv`,
// which may be block r of `send` (in place). A phase of the hierarchical all_reduce.
void reduce_scatter_balanced(const Ctx& ctx, const void* send, void* recv, size_t count,
                             DType dtype, ReduceOp op);

}  // namespace tdist::coll
