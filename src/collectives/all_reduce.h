// all_reduce: every rank ends with op applied element-wise over all ranks' vectors.
//
// Algorithms (selection.h): kRing (reduce-scatter then all-gather around the ring,
// pipelined in chunks so sending, receiving and reducing overlap; scratch is
// kPipelineDepth chunks whatever the size and world), kHalvingDoubling (Rabenseifner:
// recursive halving reduce-scatter, recursive doubling all-gather; a non-power-of-two
// world first folds its extra ranks in, MPICH style), kRecursiveDoubling (log2(n)
// exchanges of the whole vector; best for tiny vectors). All three give every rank the
// same bits. Scratch of every algorithm is bounded by kPipelineDepth chunks. With two
// ranks, ring and halving-doubling run the same direct exchange (each rank reduces one
// half, then sends it back, pipelined in chunks); out of place and without premul_sum it
// reads `send` where it is and receives straight into `recv` (no copy, no scratch).
// kSlots (small vectors on one host over shared memory: Comm::slot_gather): every rank's
// vector goes to every other at once through memory they map, and each rank reduces the
// copies in rank order (the same bits everywhere); no message, no request.
// kHierarchical (groups spanning hosts, hierarchy.h): reduce-scatter inside each host,
// all-reduce of each shard among the ranks with its local index (one per host),
// all-gather inside each host; for small vectors or unequal hosts, reduce to each host's
// leader, all-reduce among the leaders, broadcast inside each host.
//
// Buffers: `send` and `recv` hold `count` elements; send == recv is in place; `send` is
// never written otherwise. premul_sum scales each rank's own contribution; avg divides
// the result by the world size. Blocks the calling thread until done. Failure: throws
// what the transport reports (PeerError, TimeoutError at ctx.deadline, DesyncError);
// the Comm is then aborted and `recv` holds unspecified data. InvalidArgument (bad op
// for the dtype, unusable algorithm) is thrown before anything is sent.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "collectives/selection.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::coll {

void all_reduce(const Ctx& ctx, const void* send, void* recv, size_t count, DType dtype,
                ReduceOp op, Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
