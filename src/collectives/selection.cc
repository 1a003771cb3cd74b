// Algorithm selection (selection.h): the topology rule and the table of size thresholds.
//
// Groups spanning hosts (1 < num_hosts < world) run the hierarchical algorithms at every
// size. Large messages gain because only 1/L of the vector per rank (all_reduce) or one
// copy per host (broadcast, reduce, the gathers) crosses the network, on all of a host's
// links at once. Small messages were considered for flat algorithms: flat recursive
// doubling or a binomial tree has as few inter-host rounds as the hierarchical form only
// when a host's ranks are consecutive and a power of two, and otherwise up to log2(world)
// rounds on TCP; the hierarchical form always has the minimum, ceil(log2(num_hosts)),
// and pays for it with ~2 log2(ranks per host) intra-host rounds over shared memory,
// each an order of magnitude cheaper than a ~15 us TCP round. So the hierarchical form
// is never much worse and often much better; below kHierarchicalShards all_reduce uses
// its latency form (all_reduce.cc). With one rank per host (num_hosts == world) there
// is no intra-host phase and the flat algorithms are chosen as for one host.
//
// Slots (kSlots): on one host, where every pair of ranks shares memory and the Comm offers
// slots (Comm::slot_bytes: 4 KiB over shm), all_reduce up to that size and barrier post
// each rank's vector to every peer at once and reduce it where it lies: one exchange, no
// message, no request (issue 35: 0.8-1.1 us per small all_reduce over messages on this
// machine, against OpenMPI's 0.2-0.4; docs/performance.md has the figures with slots).
//
// Flat algorithms, by size: a table of thresholds (bytes of the per-rank vector) per link
// class (Topology::link: shm when shared memory joins every pair of ranks, tcp otherwise;
// unknown selects as tcp) and world size 2, 3 and 4, each the largest size at which the
// latency algorithm still runs. A larger world takes the row of the measured world of its
// kind: 4 for a power of two, 3 otherwise (recursive doubling and halving-doubling first
// fold the ranks beyond a power of two into it: one more round, with the whole vector).
// Nothing larger was measured; the alpha-beta model would move the binomial/chain and
// halving-doubling/ring crossovers up with the world, the recursive-doubling one down.
//  all_reduce  recursive doubling (log2(n) rounds, each sending the whole vector) up to
//              recursive_doubling; halving-doubling (2 log2(n) rounds, 2(n-1)/n of the
//              vector) up to halving_doubling; above, the pipelined ring (2(n-1) rounds,
//              the same bytes, neighbour traffic only). With 2 ranks halving-doubling and
//              the ring are the same exchange (all_reduce.cc).
//  broadcast   binomial tree (log2(n) hops, the root sends log2(n) copies) up to
//              broadcast_binomial; above, the pipelined chain.
//  reduce      binomial tree up to reduce_binomial; above, the pipelined chain.
//
// Measured on 2026-12-01 on the project's 2-core VM (AMD EPYC, shared) by
//   bash scripts/sweep_algorithms.sh build --rounds 5 --iters-scale 2 --wait-idle 300
// (tests/collectives/algo_sweep.cc: forked processes over connect_tcp_comm and
// connect_shm_comm, 8 B..64 MiB by factors of 2, each figure the median of 5 rounds'
// medians and including a barrier; a threshold moves only where one algorithm is more
// than 10% faster in most rounds, so ties kept the previous TCP-only thresholds). The tcp
// runs of 2 and 3 ranks, which other processes disturbed, were repeated (--transports tcp
// --worlds 2, then 3, with --raw FILE) and the table read from the merged files with
// --from-raw. What the machine shows: with 2 ranks every waiter polls (a core per rank),
// a barrier pair takes 1 us over shm and 11 us over tcp, and over shm the ring overtakes
// recursive doubling 4x earlier (128 KiB) than over tcp (512 KiB): copies, not round
// trips, are what costs there. With 3 and 4 ranks on 2 cores nobody polls and every hop is
// a wake-up (a barrier pair 65-150 us on either transport), so the fewest rounds win
// longer: halving-doubling beats the ring at every large size with 4 ranks, and the
// binomial tree matches the chain (whose pipelining wants a core per rank) from about
// 1 MiB up, within the noise. A host with a core per rank would move those crossovers
// down; rerun the sweep there (docs/performance.md).
#include "collectives/selection.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "tdist/error.h"

namespace tdist::coll {
namespace {

using transport::LinkClass;

constexpr size_t kAlways = SIZE_MAX;  // the latency algorithm at every size

// Bytes of the per-rank vector up to which (inclusive) the latency algorithm runs.
struct Thresholds {
  size_t recursive_doubling;  // all_reduce: recursive doubling up to this;
  size_t halving_doubling;    //   then halving-doubling up to this; the ring above
  size_t broadcast_binomial;  // broadcast: binomial tree up to this; the chain above
  size_t reduce_binomial;     // reduce: binomial tree up to this; the chain above
};

// By world size 2, 3, 4: {recursive_doubling, halving_doubling, broadcast_binomial,
// reduce_binomial}, as the sweep proposed them.
constexpr Thresholds kShmTable[] = {
    {128 << 10, 128 << 10, kAlways, 256 << 10},  // world 2
    {512 << 10, kAlways, 512 << 10, 256 << 10},  // world 3
    {32 << 10, kAlways, 8 << 20, 256 << 10},     // world 4
};
constexpr Thresholds kTcpTable[] = {
    {512 << 10, 512 << 10, kAlways, 64 << 10},  // world 2
    {64 << 10, 128 << 10, 8 << 20, 256 << 10},  // world 3
    {32 << 10, kAlways, 4 << 20, 512 << 10},    // world 4
};
constexpr int kLargestMeasuredWorld = 4;

Thresholds thresholds(LinkClass link, int world) {
  const Thresholds* table = link == LinkClass::kShm ? kShmTable : kTcpTable;
  if (world > kLargestMeasuredWorld) world = (world & (world - 1)) == 0 ? 4 : 3;
  return table[std::max(world, 2) - 2];
}

constexpr Algorithm kAllReduceAlgos[] = {Algorithm::kRing, Algorithm::kHalvingDoubling,
                                         Algorithm::kRecursiveDoubling, Algorithm::kHierarchical,
                                         Algorithm::kSlots};
constexpr Algorithm kTreeAlgos[] = {Algorithm::kBinomial, Algorithm::kChain,
                                    Algorithm::kHierarchical};
constexpr Algorithm kRingAlgos[] = {Algorithm::kRing, Algorithm::kHierarchical};
constexpr Algorithm kLinearAlgos[] = {Algorithm::kLinear};
constexpr Algorithm kPairwiseAlgos[] = {Algorithm::kPairwise};
constexpr Algorithm kBarrierAlgos[] = {Algorithm::kDissemination, Algorithm::kHierarchical,
                                       Algorithm::kSlots};

bool has_hierarchical(Collective c) {
  for (Algorithm a : algorithms_for(c)) {
    if (a == Algorithm::kHierarchical) return true;
  }
  return false;
}

Algorithm by_size(Collective c, size_t bytes, int world, LinkClass link) {
  const Thresholds t = thresholds(link, world);
  switch (c) {
    case Collective::kAllReduce:
      if (bytes <= t.recursive_doubling) return Algorithm::kRecursiveDoubling;
      if (bytes <= t.halving_doubling) return Algorithm::kHalvingDoubling;
      return Algorithm::kRing;
    case Collective::kBroadcast:
      return bytes <= t.broadcast_binomial ? Algorithm::kBinomial : Algorithm::kChain;
    case Collective::kReduce:
      return bytes <= t.reduce_binomial ? Algorithm::kBinomial : Algorithm::kChain;
    default:
      return algorithms_for(c).front();
  }
}

}  // namespace

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kBarrier:
      return "barrier";
  }
  return "?";
}

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kBinomial:
      return "binomial";
    case Algorithm::kChain:
      return "chain";
    case Algorithm::kLinear:
      return "linear";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kDissemination:
      return "dissemination";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kSlots:
      return "slots";
  }
  return "?";
}

std::span<const Algorithm> algorithms_for(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return kAllReduceAlgos;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return kTreeAlgos;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return kRingAlgos;
    case Collective::kGather:
    case Collective::kScatter:
      return kLinearAlgos;
    case Collective::kAllToAll:
      return kPairwiseAlgos;
    case Collective::kBarrier:
      return kBarrierAlgos;
  }
  return {};
}

std::string algorithm_names(Collective c) {
  std::string out;
  for (Algorithm a : algorithms_for(c)) {
    if (!out.empty()) out += ", ";
    out += algorithm_name(a);
  }
  return out;
}

Algorithm select_algorithm(Collective c, size_t bytes, int world, int num_hosts, LinkClass link,
                           Algorithm requested, Algorithm forced, size_t slot_bytes) {
  const bool slots =
      slot_bytes > 0 && bytes <= slot_bytes && world <= kMaxSlotWorld && num_hosts <= 1;
  if (requested != Algorithm::kAuto) {
    for (Algorithm a : algorithms_for(c)) {
      if (a != requested) continue;
      return a == Algorithm::kSlots && !slots ? by_size(c, bytes, world, link) : a;
    }
    TDIST_THROW(InvalidArgument, collective_name(c), " cannot run algorithm ",
                algorithm_name(requested), "; valid: ", algorithm_names(c));
  }
  if (forced != Algorithm::kAuto && (forced != Algorithm::kSlots || slots)) return forced;
  if (num_hosts > 1 && num_hosts < world && has_hierarchical(c)) return Algorithm::kHierarchical;
  // Slots: one exchange with no message, where the Comm has them (selection.h).
  if (slots && (c == Collective::kAllReduce || c == Collective::kBarrier)) return Algorithm::kSlots;
  return by_size(c, bytes, world, link);
}

}  // namespace tdist::coll
