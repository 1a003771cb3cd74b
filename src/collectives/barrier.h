// barrier: returns on each rank only after every rank has entered it.
//
// Algorithms (selection.h): kDissemination: in round k rank r sends a zero-byte message
// to r+2^k and waits for one from r-2^k; after ceil(log2(n)) rounds every rank has heard,
// directly or not, from every other. kHierarchical (groups spanning hosts, hierarchy.h):
// each host's ranks report to their leader, the leaders run the dissemination barrier,
// each leader releases its host. kSlots (one host over shared memory, Comm::slot_gather):
// every rank posts an empty block to every other and waits for theirs. Blocks the calling
// thread. Failure: throws what the transport reports (PeerError, TimeoutError at
// ctx.deadline); the Comm is then aborted.
#pragma once

#include "collectives/context.h"
#include "collectives/selection.h"

namespace tdist::coll {

void barrier(const Ctx& ctx, Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
