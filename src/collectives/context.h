// Ctx: what every collective algorithm is given (written by the backends layer, which
// owns the Comm and numbers the operations). Shared by all collective families.
//
// comm      the transport-neutral group (transport/comm.h); the algorithm only posts
//           isend/irecv on it and waits
// seq       the group's operation number: every message of this operation uses
//           transport::collective_tag(seq, step)
// deadline  when the operation must be done; waits throw TimeoutError after it
#pragma once

#include <cstdint>

#include "tdist/deadline.h"
#include "transport/comm.h"

namespace tdist::coll {

struct Ctx {
  transport::Comm& comm;
  uint64_t seq;
  Deadline deadline;
};

}  // namespace tdist::coll
