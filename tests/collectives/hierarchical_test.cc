// SubComm and Hosts (hierarchy.h), the pieces of the hierarchical algorithms, over
// MemComm.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "collectives/hierarchy.h"
#include "collectives/mem_comm.h"

namespace tdist::coll {
namespace {

using testing::run_ranks;
using testing::run_ranks_ok;

Deadline op_deadline() { return Deadline::after(std::chrono::seconds(60)); }

TEST(SubComm, RenumbersRanksAndMovesTagsIntoItsPhase) {
  run_ranks_ok(4, [](transport::Comm& comm) {
    const uint64_t seq = 5;
    if (comm.rank() == 3 || comm.rank() == 1) {
      detail::SubComm view(comm, {3, 1}, 2);
      EXPECT_EQ(view.size(), 2);
      EXPECT_EQ(view.rank(), comm.rank() == 3 ? 0 : 1);
      EXPECT_EQ(view.parent_rank(1), 1);
      if (comm.rank() == 3) {
        int v = 42;
        view.isend(1, transport::collective_tag(seq, 7), &v, sizeof v)->wait(op_deadline());
        // A step that does not fit below the phase bits, a p2p tag, a bad peer.
        EXPECT_THROW(view.isend(1, transport::collective_tag(seq, 1u << 20), &v, 0),
                     InvalidArgument);
        EXPECT_THROW(view.isend(1, transport::p2p_tag(1), &v, 0), InvalidArgument);
        EXPECT_THROW(view.isend(2, transport::collective_tag(seq, 0), &v, 0), InvalidArgument);
      } else {
        int v = 0;  // arrives on the parent with step (2 << 20) | 7, from parent rank 3
        comm.irecv(3, transport::collective_tag(seq, (2u << 20) | 7), &v, sizeof v)
            ->wait(op_deadline());
        EXPECT_EQ(v, 42);
      }
    }
    EXPECT_THROW(detail::SubComm(comm, {0, 1}, 0), InvalidArgument);
    EXPECT_THROW(detail::SubComm(comm, {0, 1, 2, 3}, 16), InvalidArgument);
    if (comm.rank() == 2) {
      EXPECT_THROW(detail::SubComm(comm, {0, 1}, 1), InvalidArgument);
    }
  });
}

TEST(SubComm, AbortAndErrorAreTheParents) {
  run_ranks(2, [](transport::Comm& comm) {
    detail::SubComm view(comm, {0, 1}, 1);
    if (comm.rank() == 0) view.abort(nullptr);
    while (view.error() == nullptr) std::this_thread::yield();
    EXPECT_NE(comm.error(), nullptr);
  });
}

TEST(Hosts, FromTopology) {
  run_ranks_ok(6, [](transport::Comm& comm) {
    comm.set_topology(transport::Topology{{0, 1, 1, 0, 1, 2}});
    const detail::Hosts h = detail::Hosts::of(comm);
    EXPECT_EQ(h.count(), 3);
    EXPECT_FALSE(h.uniform);
    EXPECT_EQ(h.ranks, (std::vector<std::vector<int>>{{0, 3}, {1, 2, 4}, {5}}));
    EXPECT_EQ(h.column(1), (std::vector<int>{3, 2}));
    EXPECT_EQ(h.column(2), (std::vector<int>{4}));
    EXPECT_EQ(h.representatives(2), (std::vector<int>{0, 2, 5}));
    EXPECT_EQ(h.representatives(0), (std::vector<int>{0, 1, 5}));
    const int expected_local[] = {0, 0, 1, 1, 2, 0};
    EXPECT_EQ(h.local, expected_local[comm.rank()]);
    EXPECT_EQ(h.host, (std::vector<int>{0, 1, 1, 0, 1, 2})[static_cast<size_t>(comm.rank())]);
  });
  run_ranks_ok(3, [](transport::Comm& comm) {
    const detail::Hosts one = detail::Hosts::of(comm);  // unknown: one host
    EXPECT_EQ(one.count(), 1);
    EXPECT_EQ(one.local, comm.rank());
    comm.set_topology(transport::Topology{{0, 1}});
    EXPECT_THROW(detail::Hosts::of(comm), InvalidArgument);
  });
}

}  // namespace
}  // namespace tdist::coll
