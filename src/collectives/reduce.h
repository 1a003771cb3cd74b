// reduce: `root` ends with op applied element-wise over all ranks' vectors.
//
// Algorithms (selection.h): kBinomial (log2(n) rounds, each non-leaf folding its
// children's partial vectors into its own; a non-root keeps a full-size partial in
// scratch, so it serves small vectors), kChain (vr n-1 -> ... -> root in chunks, each
// rank folding its own chunk into the one passing through; scratch is 2 *
// kPipelineDepth chunks whatever the size) and kHierarchical (groups spanning hosts,
// hierarchy.h: each host reduces to one rank (its leader, or the root), those reduce to
// the root; a full-size partial in scratch on the leaders).
//
// Buffers: `send` holds `count` elements on every rank and is never written (unless
// send == recv on the root: in place); `recv` (count elements) is used on the root only
// and may be null elsewhere. premul_sum scales each rank's contribution; avg divides at
// the root. Blocks the calling thread. Failure: throws what the transport reports
// (PeerError, TimeoutError at ctx.deadline, DesyncError); the Comm is then aborted.
// InvalidArgument (bad op, root out of range, unusable algorithm) before anything is sent.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "collectives/selection.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::coll {

void reduce(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
            int root, Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
