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
  // Whether chunk_bytes was given (parse(), or TDIST_CHUNK_BYTES set): then every group
  // uses it. Otherwise groups on device memory use a chunk of their own (comm_device.h).
  bool chunk_given = false;

  Algorithm forced(Collective c) const { return forced_algorithms[static_cast<size_t>(c)]; }

  // From a TDIST_ALGO value ("all_reduce=ring,broadcast=chain", a bare all_reduce
  // algorithm, "" or "auto") and a chunk size (given: chunk_given is set).
  static CollectiveSettings parse(std::string_view algo, int64_t chunk_bytes);
  // From the environment, now.
  static CollectiveSettings from_environment();
};

}  // namespace tdist::coll
