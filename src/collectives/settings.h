// CollectiveSettings: the environment settings of the collectives (TDIST_ALGO,
// TDIST_CHUNK_BYTES), parsed once and carried in every Ctx, so that no collective reads
// or parses the environment.
//
// A group resolves them once, when it is made (from_environment()), and puts them in each
// Ctx it builds; a Ctx built without them forces nothing and uses the declared chunk size.
// Tests pass settings explicitly (parse()) instead of setenv.
// Parsing validates the whole TDIST_ALGO value: an unknown collective or algorithm name,
// or an algorithm that cannot run the collective, is InvalidArgument naming the valid
// choices; a chunk size below 1 is InvalidArgument. Plain value; thread-safe to read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "collectives/selection.h"

namespace tdist::coll {

struct CollectiveSettings {
  // What TDIST_ALGO forces, by Collective (kAuto: nothing forced).
  std::array<Algorithm, kNumCollectives> forced_algorithms{};
  // The pipeline chunk size in bytes (TDIST_CHUNK_BYTES' declared default until parsed).
  size_t chunk_bytes = size_t{256} * 1024;
  // Whether chunk_bytes was given (parse(), or TDIST_CHUNK_BYTES set): then every
  // collective uses it. Otherwise the out-of-place two-rank all_reduce over shared memory
  // uses kShmAllReduceChunk.
  bool chunk_given = false;
  // That all_reduce's chunk when every link is shm and no chunk was given: with
  // single-copy transfers, fewer and larger chunks win from 1 MiB up (docs/performance.md).
  // In place (scratch slots), reduce and broadcast keep chunk_bytes.
  static constexpr size_t kShmAllReduceChunk = size_t{1} << 20;

  Algorithm forced(Collective c) const { return forced_algorithms[static_cast<size_t>(c)]; }

  // From a TDIST_ALGO value ("all_reduce=ring,broadcast=chain", a bare all_reduce
  // algorithm, "" or "auto") and a chunk size (given: chunk_given is set).
  static CollectiveSettings parse(std::string_view algo, int64_t chunk_bytes);
  // From the environment, now.
  static CollectiveSettings from_environment();
};

}  // namespace tdist::coll
