// The collective algorithms, one header per family (see each for its contract), written
// against transport::Comm only. Every call blocks the calling thread, takes a Ctx (the
// Comm, the operation's sequence number for message tags, a deadline) and an optional
// Algorithm (kAuto: selection.h decides by size and world). A failed call has aborted
// the Comm before it throws.
#pragma once

#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/all_to_all.h"
#include "collectives/barrier.h"
#include "collectives/broadcast.h"
#include "collectives/context.h"
#include "collectives/gather_scatter.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/selection.h"
