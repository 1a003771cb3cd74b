// The pieces of the hierarchical algorithms (selection.h's kHierarchical): a sub-Comm view
// that lets the flat algorithms run unchanged on one phase, and the hosts of a group.
// Internal to src/collectives and its tests.
//
// SubComm  a view of some of a parent Comm's ranks as a Comm of its own: view rank i is
//          parent rank ranks[i] (the calling rank must be one of them). Its tags are the
//          parent's collective tags with the step moved into the view's own part of the
//          24-bit step space: step s (< 2^20) becomes (phase << 20) | s, so the phases of
//          one operation (phase 1..15) never match each other's messages, nor the
//          operation's own direct messages (steps below 2^20: phase 0). abort() and
//          error() are the parent's. Its topology is unknown (one host), and phase_ctx()
//          drops TDIST_ALGO's choices, so kAuto picks flat algorithms on a view. Does not
//          own the parent, which must outlive it; thread-safe as the parent.
// Hosts    the hosts of a Comm from its Topology (unknown: one host with every rank): the
//          ranks of each host, ascending, and where the calling rank sits.
//
// Reduce ops across phases: the first phase reduces each rank's own contribution with
// first_phase_op(op) (premul_sum scales it; avg only sums); the later phases combine
// partials with later_phase_op(op) (premul_sum and avg sum); core::finish(op, world) is
// applied once to the final result, so avg divides once by the whole world.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "collectives/context.h"
#include "tdist/reduce_op.h"
#include "transport/comm.h"

namespace tdist::coll::detail {

inline constexpr uint32_t kPhaseShift = 20;
inline constexpr uint32_t kMaxPhase = 15;

class SubComm final : public transport::Comm {
 public:
  SubComm(transport::Comm& parent, std::vector<int> ranks, uint32_t phase);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  transport::RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  transport::RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override;
  bool carries_device(int peer) const override;
  transport::RequestPtr isend_device(int peer, uint64_t tag, const void* data,
                                     size_t bytes) override;
  transport::RequestPtr irecv_device(int peer, uint64_t tag, void* data, size_t bytes) override;
  void abort(std::exception_ptr reason) override { parent_.abort(std::move(reason)); }
  std::exception_ptr error() const override { return parent_.error(); }

  // The parent rank of view rank `peer` (InvalidArgument when out of range).
  int parent_rank(int peer) const;

 private:
  uint64_t parent_tag(uint64_t tag) const;

  transport::Comm& parent_;
  const std::vector<int> ranks_;
  const uint32_t phase_;
  int rank_ = -1;
};

// The Ctx of a phase run on `view`: same seq and deadline, same chunk size, nothing
// forced (the phase's algorithm is chosen by size).
Ctx phase_ctx(const Ctx& ctx, SubComm& view);

struct Hosts {
  std::vector<std::vector<int>> ranks;  // ranks[h]: the ranks on host h, ascending
  int host = 0;                         // the calling rank's host
  int local = 0;                        // its index in ranks[host]
  bool uniform = true;                  // every host has as many ranks

  // From comm.topology() (InvalidArgument when it does not cover comm.size() ranks).
  static Hosts of(const transport::Comm& comm);

  int count() const { return static_cast<int>(ranks.size()); }
  const std::vector<int>& mine() const { return ranks[host]; }
  // The rank with local index `i` on each host that has one, by host.
  std::vector<int> column(int i) const;
  // One rank per host, by host: its lowest (the leader), but `root` on root's host.
  std::vector<int> representatives(int root) const;
  // The host of `rank` and its local index there.
  int host_of(int rank) const;
  int local_of(int rank) const;
};

ReduceOp first_phase_op(ReduceOp op);
ReduceOp later_phase_op(ReduceOp op);

// The segments 0..n-1 of an operation in three phases, the middle one on `helper` (the
// group's second thread: context.h) so that it overlaps the other two (NCCL pipelines its
// hierarchical all_reduce so): while segment k crosses hosts, segment k+1 is reduced and
// segment k-1 gathered inside the host. Without a helper the calling thread runs before(k),
// middle(k), after(k) for each k in turn.
// The calling thread runs before(0), before(1), after(0), before(2), after(1), ...,
// after(n-1), after(k) once middle(k) has returned; the helper middle(0), ..., middle(n-1),
// middle(k) once before(k) has returned. Every rank runs the phases in this order, so each
// phase's messages (one tag space per phase: SubComm) meet in order. An exception on either
// thread aborts `comm` with it (a wait blocked on the other thread then fails too); the
// first is rethrown here once the helper's task has ended. The helper inherits the calling
// thread's polling (polling.h: a background thread's helper never polls).
void run_overlapped(transport::Comm& comm, core::HelperThread* helper, size_t n,
                    const std::function<void(size_t)>& before,
                    const std::function<void(size_t)>& middle,
                    const std::function<void(size_t)>& after);

}  // namespace tdist::coll::detail
