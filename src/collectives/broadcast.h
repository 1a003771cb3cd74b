// broadcast: `bytes` bytes at `data` on `root` are copied into `data` on every rank.
//
// Algorithms (selection.h): kBinomial (log2(n) rounds of the whole buffer; small
// messages) and kChain (root -> root+1 -> ... in chunks, each rank forwarding a chunk as
// soon as it has it; large messages: every link carries the data once), kHierarchical
// (groups spanning hosts, hierarchy.h: root to one rank per host, then inside each host;
// the data crosses to each other host once). No scratch.
//
// Blocks the calling thread until done. Failure: throws what the transport reports
// (PeerError, TimeoutError at ctx.deadline, DesyncError); the Comm is then aborted.
// InvalidArgument (root out of range, unusable algorithm) before anything is sent.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "collectives/selection.h"

namespace tdist::coll {

void broadcast(const Ctx& ctx, void* data, size_t bytes, int root,
               Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
