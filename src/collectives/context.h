// Ctx: what every collective algorithm is given (written by the backends layer, which
// owns the Comm and numbers the operations). Shared by all collective families.
//
// comm      the transport-neutral group (transport/comm.h); the algorithm only posts
//           isend/irecv on it and waits; its topology() steers selection (selection.h)
// seq       the group's operation number: every message of this operation uses
//           transport::collective_tag(seq, step)
// deadline  when the operation must be done; waits throw TimeoutError after it
// settings  TDIST_ALGO and TDIST_CHUNK_BYTES, resolved once where the group is made
//           (settings.h), which passes its own; left out, nothing forced and the defaults
// chosen    when not null, the collective stores there the algorithm it chose (the first
//           choice: a hierarchical algorithm's phases run on contexts without it), for
//           the timeline; written by the thread that runs the collective
// memory    where the buffers are: host, or CUDA device memory (then `device` is the
//           device's kernels, copies and scratch: device_ops.h; messages go as
//           Comm::isend_device); algorithms reach both through detail.h's helpers
// helper    a second thread the group lends to an operation that overlaps two of its
//           phases (hierarchy.h's run_overlapped), or null: the phases then run in turn on
//           the calling thread; no algorithm starts a thread of its own
#pragma once

#include <cstdint>

#include "collectives/device_ops.h"
#include "collectives/settings.h"
#include "core/helper_thread.h"
#include "tdist/deadline.h"
#include "tdist/device.h"
#include "transport/comm.h"

namespace tdist::coll {

struct Ctx {
  transport::Comm& comm;
  uint64_t seq;
  Deadline deadline;
  CollectiveSettings settings{};  // nothing forced; a group passes its own (settings.h)
  Algorithm* chosen = nullptr;
  MemoryKind memory = MemoryKind::kHost;
  DeviceOps* device = nullptr;
  core::HelperThread* helper = nullptr;
};

}  // namespace tdist::coll
