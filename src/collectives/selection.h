// Algorithm selection: which algorithm a collective runs, by topology, link class,
// message size and world size.
//
// Every collective takes an Algorithm; kAuto (the default) asks select_algorithm(), which
// honours what TDIST_ALGO forces first (parsed once, settings.h: "all_reduce=ring,
// broadcast=chain", or a bare name such as "ring", which applies to all_reduce) and
// otherwise decides by topology and size:
//  - a group spanning hosts (1 < num_hosts < world; Comm::topology()) runs kHierarchical
//    for all_reduce, broadcast, reduce, all_gather, reduce_scatter and barrier, whatever
//    the size (selection.cc says why);
//  - otherwise, and for the other collectives, a flat algorithm by the size thresholds
//    measured per link class (Topology::link: shm when shared memory joins every pair of
//    ranks, tcp otherwise or when unknown) and world size, in selection.cc.
// kHierarchical forced on one host degenerates correctly (one intra-host phase). An
// algorithm that cannot run the collective is InvalidArgument naming the valid choices.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "transport/topology.h"

namespace tdist::coll {

enum class Collective : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
};

inline constexpr size_t kNumCollectives = 9;
inline constexpr Collective kAllCollectives[kNumCollectives] = {
    Collective::kAllReduce,     Collective::kBroadcast, Collective::kReduce,
    Collective::kAllGather,     Collective::kGather,    Collective::kScatter,
    Collective::kReduceScatter, Collective::kAllToAll,  Collective::kBarrier};

enum class Algorithm : uint8_t {
  kAuto,
  kRing,               // all_reduce, all_gather, reduce_scatter: pipelined ring
  kHalvingDoubling,    // all_reduce: Rabenseifner (recursive halving, then doubling)
  kRecursiveDoubling,  // all_reduce: full-vector exchange, log2(n) rounds
  kBinomial,           // broadcast, reduce: binomial tree
  kChain,              // broadcast, reduce: pipelined chain
  kLinear,             // gather, scatter: root talks to every rank
  kPairwise,           // all_to_all: pairwise exchange
  kDissemination,      // barrier
  kHierarchical,       // all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier:
                       // phases inside each host and between hosts (hierarchy.h)
  kSlots,              // all_reduce, barrier: every rank's vector through shared-memory
                       // slots at once (Comm::slot_gather), reduced where it lies
};

// kSlots runs on at most this many ranks (each posts its vector once per peer).
inline constexpr int kMaxSlotWorld = 8;

// "all_reduce", "broadcast", ... and "auto", "ring", "halving_doubling", ...
std::string_view collective_name(Collective c);
std::string_view algorithm_name(Algorithm a);

// The algorithms that can run `c` (kAuto excluded), the first being the simplest.
std::span<const Algorithm> algorithms_for(Collective c);
// Their names, joined by ", " (for error messages).
std::string algorithm_names(Collective c);

// The algorithm to run `c` on `bytes` (the per-rank message: the whole vector for
// all_reduce, broadcast and reduce; the largest block for the gathers and scatters)
// among `world` ranks on `num_hosts` hosts (Topology::num_hosts(): 1 when unknown) joined
// by links of class `link` (Topology::link; kUnknown selects as kTcp). A `requested`
// algorithm other than kAuto wins (InvalidArgument when it cannot run `c`); then `forced`
// (what TDIST_ALGO forces for `c`: CollectiveSettings::forced(c)); then the topology and
// the thresholds. `slot_bytes`: the Comm's slots for these buffers (Comm::slot_bytes; 0
// for device memory or a Comm without them): all_reduce and barrier on one host run
// kSlots up to that many bytes and kMaxSlotWorld ranks, and kSlots requested or forced
// where it cannot run gives way to the size's algorithm.
Algorithm select_algorithm(Collective c, size_t bytes, int world, int num_hosts,
                           transport::LinkClass link, Algorithm requested = Algorithm::kAuto,
                           Algorithm forced = Algorithm::kAuto, size_t slot_bytes = 0);

}  // namespace tdist::coll
