// barrier (barrier.h): dissemination over zero-byte messages, hierarchical, slots.
#include "collectives/barrier.h"

#include <array>
#include <vector>

#include "collectives/detail.h"
#include "collectives/hierarchy.h"

namespace tdist::coll {
namespace {

void dissemination(const Ctx& ctx) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  detail::RequestQueue sends(ctx);
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    const uint64_t t = detail::tag(ctx, round);
    sends.push(detail::isend(ctx, detail::mod(r + dist, n), t, nullptr, 0));
    detail::RequestQueue recv(ctx);
    recv.push(detail::irecv(ctx, detail::mod(r - dist, n), t, nullptr, 0));
    recv.wait_all();
  }
  sends.wait_all();
}

// Hierarchical (hierarchy.h): each host's ranks report to their leader (step 0), the
// leaders run the dissemination barrier among themselves (phase 1), and each leader
// releases its host's ranks (step 1).
void hierarchical(const Ctx& ctx) {
  const detail::Hosts hosts = detail::Hosts::of(ctx.comm);
  const std::vector<int>& mine = hosts.mine();
  const int leader = mine.front();
  const uint64_t arrive = detail::tag(ctx, 0);
  const uint64_t release = detail::tag(ctx, 1);
  detail::RequestQueue q(ctx);
  if (ctx.comm.rank() != leader) {
    q.push(detail::isend(ctx, leader, arrive, nullptr, 0));
    q.push(detail::irecv(ctx, leader, release, nullptr, 0));
    q.wait_all();
    return;
  }
  for (size_t i = 1; i < mine.size(); ++i) q.push(detail::irecv(ctx, mine[i], arrive, nullptr, 0));
  q.wait_all();
  detail::SubComm leaders(ctx.comm, hosts.column(0), 1);
  dissemination(detail::phase_ctx(ctx, leaders));
  for (size_t i = 1; i < mine.size(); ++i) q.push(detail::isend(ctx, mine[i], release, nullptr, 0));
  q.wait_all();
}

}  // namespace

void barrier(const Ctx& ctx, Algorithm algo) {
  const Algorithm chosen = detail::choose(ctx, Collective::kBarrier, 0, algo);
  if (chosen == Algorithm::kHierarchical) {
    hierarchical(ctx);
  } else if (chosen == Algorithm::kSlots && ctx.comm.size() > 1) {
    // Every rank posts an empty block and waits for every other's (Comm::slot_gather).
    std::array<const void*, kMaxSlotWorld> blocks{};
    ctx.comm.slot_gather(detail::tag(ctx, 0), nullptr, 0, blocks.data(), ctx.deadline);
  } else {
    dissemination(ctx);
  }
}

}  // namespace tdist::coll
