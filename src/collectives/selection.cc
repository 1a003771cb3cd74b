// Algorithm selection (selection.h): the topology rule and the size thresholds.
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
// Thresholds (bytes of the per-rank vector), measured with tests/collectives/algo_sweep
// over the TCP transport between processes on a 2-core machine (2 and 3 ranks), and for
// larger worlds from the alpha-beta model with that machine's numbers (~15 us per round,
// ~1 GB/s):
//  all_reduce  recursive doubling (log2(n) rounds, log2(n) vectors sent) up to
//              kAllReduceSmall; with 2 ranks it sends no more than halving-doubling in
//              one round instead of two and measured fastest up to 256 KiB, so up to
//              kAllReduceTwoRanks. Halving-doubling (2 log2(n) rounds, 2(n-1)/n vectors)
//              up to kAllReduceLarge; above, the pipelined ring (2(n-1) rounds, same
//              bytes, neighbour traffic only, reduction overlapped with transfer).
//  broadcast   binomial tree up to kBroadcastTree or for 2 ranks (one hop either way);
//              above, the pipelined chain (each link carries the data once).
//  reduce      binomial tree up to kReduceTree (measured: 1.5x faster at 64 KiB-256 KiB
//              with 2 ranks); above, the chain (2-3x faster from 1 MiB: no full-size
//              copy on the non-roots).
#include "collectives/selection.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "tdist/error.h"

namespace tdist::coll {
namespace {

using transport::LinkClass;

constexpr size_t kAlways = SIZE_MAX;  // the first algorithm at every size
constexpr size_t kNever = 0;          // the second algorithm at every size

// Bytes of the per-rank vector up to which (inclusive) the latency algorithm runs.
struct Thresholds {
  size_t recursive_doubling;  // all_reduce: recursive doubling up to this;
  size_t halving_doubling;    //   then halving-doubling up to this; the ring above
  size_t broadcast_binomial;  // broadcast: binomial tree up to this; the chain above
  size_t reduce_binomial;     // reduce: binomial tree up to this; the chain above
};

// By link class and world size 2, 3, 4 (for now both hold the older TCP-only thresholds).
constexpr Thresholds kShmTable[] = {
    {512 << 10, 512 << 10, kAlways, 256 << 10},
    {32 << 10, 1 << 20, 64 << 10, 256 << 10},
    {32 << 10, 1 << 20, 64 << 10, 256 << 10},
};
constexpr Thresholds kTcpTable[] = {
    {512 << 10, 512 << 10, kAlways, 256 << 10},
    {32 << 10, 1 << 20, 64 << 10, 256 << 10},
    {32 << 10, 1 << 20, 64 << 10, 256 << 10},
};
constexpr int kLargestMeasuredWorld = 4;

// A threshold above which an algorithm with rounds linear in the world (ring, chain)
// takes over, for `world` > kLargestMeasuredWorld: scaled by (world - 1) / 3, as its
// latency grows (saturating).
size_t scale_linear(size_t bytes, int world) {
  if (bytes == kAlways || bytes == kNever) return bytes;
  const size_t factor = static_cast<size_t>(world - 1);
  return bytes > kAlways / factor ? kAlways : bytes * factor / (kLargestMeasuredWorld - 1);
}

Thresholds thresholds(LinkClass link, int world) {
  const Thresholds* table = link == LinkClass::kShm ? kShmTable : kTcpTable;
  if (world <= kLargestMeasuredWorld) return table[std::max(world, 2) - 2];
  Thresholds t = table[kLargestMeasuredWorld - 2];
  t.halving_doubling = std::max(t.recursive_doubling, scale_linear(t.halving_doubling, world));
  t.broadcast_binomial = scale_linear(t.broadcast_binomial, world);
  t.reduce_binomial = scale_linear(t.reduce_binomial, world);
  return t;
}

constexpr Algorithm kAllReduceAlgos[] = {Algorithm::kRing, Algorithm::kHalvingDoubling,
                                         Algorithm::kRecursiveDoubling, Algorithm::kHierarchical};
constexpr Algorithm kTreeAlgos[] = {Algorithm::kBinomial, Algorithm::kChain,
                                    Algorithm::kHierarchical};
constexpr Algorithm kRingAlgos[] = {Algorithm::kRing, Algorithm::kHierarchical};
constexpr Algorithm kLinearAlgos[] = {Algorithm::kLinear};
constexpr Algorithm kPairwiseAlgos[] = {Algorithm::kPairwise};
constexpr Algorithm kBarrierAlgos[] = {Algorithm::kDissemination, Algorithm::kHierarchical};

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
                           Algorithm requested, Algorithm forced) {
  if (requested != Algorithm::kAuto) {
    for (Algorithm a : algorithms_for(c)) {
      if (a == requested) return a;
    }
    TDIST_THROW(InvalidArgument, collective_name(c), " cannot run algorithm ",
                algorithm_name(requested), "; valid: ", algorithm_names(c));
  }
  if (forced != Algorithm::kAuto) return forced;
  if (num_hosts > 1 && num_hosts < world && has_hierarchical(c)) return Algorithm::kHierarchical;
  return by_size(c, bytes, world, link);
}

}  // namespace tdist::coll
