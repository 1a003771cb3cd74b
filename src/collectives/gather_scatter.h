// gather and scatter: blocks of `bytes` bytes between every rank and `root`.
//
// gather: rank i's `send` (bytes) lands at recv + i*bytes on the root (`recv` holds
// size*bytes there and may be null elsewhere). scatter: block i of the root's `send`
// (size*bytes; may be null elsewhere) lands in rank i's `recv` (bytes). In place on the
// root when its own block already is where it belongs. Algorithm (selection.h): kLinear,
// the root posting every receive (or send) at once. No scratch.
//
// Blocks the calling thread. Failure: throws what the transport reports (PeerError,
// TimeoutError at ctx.deadline, DesyncError); the Comm is then aborted. InvalidArgument
// (root out of range, unusable algorithm) before anything is sent.
#pragma once

#include <cstddef>

#include "collectives/context.h"
#include "collectives/selection.h"

namespace tdist::coll {

void gather(const Ctx& ctx, const void* send, void* recv, size_t bytes, int root,
            Algorithm algo = Algorithm::kAuto);

void scatter(const Ctx& ctx, const void* send, void* recv, size_t bytes, int root,
             Algorithm algo = Algorithm::kAuto);

}  // namespace tdist::coll
