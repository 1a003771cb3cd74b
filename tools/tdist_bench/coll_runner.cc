// tdist-bench collectives: layouts, calls and checks (see coll_runner.h).
#include "tdist_bench/coll_runner.h"

#include <cstring>

#include "tdist/error.h"

namespace tdist_bench {

using tdist::DType;

bool is_reduction(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter;
}

bool is_rooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

bool has_in_place(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kAllGather;
}

double bus_factor(Coll c, int world) {
  const double n = world;
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter:
      return (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
      return 1.0;
    case Coll::kBarrier:
      return 0.0;
  }
  return 0.0;
}

Layout layout_for(Coll c, size_t bytes, DType dtype, int world, int rank, int root, bool in_place) {
  const size_t elem = tdist::dtype_size(dtype);
  const size_t total = bytes / elem;
  const auto n = static_cast<size_t>(world);
  const bool at_root = rank == root;
  in_place = in_place && has_in_place(c);
  Layout l;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kSendRecv:
      l.count = total;
      l.recv_count = total;
      l.send_count = in_place ? 0 : total;
      break;
    case Coll::kBroadcast:  // one buffer: root's input, everyone's output
      l.count = total;
      l.recv_count = total;
      break;
    case Coll::kReduce:
      l.count = total;
      l.send_count = in_place ? 0 : total;
      l.recv_count = in_place || at_root ? total : 0;  // recv may be null off-root
      break;
    case Coll::kAllGather:
      l.count = total / n;
      l.send_count = in_place ? 0 : l.count;
      l.recv_count = l.count * n;
      break;
    case Coll::kGather:
      l.count = total / n;
      l.send_count = l.count;
      l.recv_count = at_root ? l.count * n : 0;
      break;
    case Coll::kScatter:
      l.count = total / n;
      l.send_count = at_root ? l.count * n : 0;
      l.recv_count = l.count;
      break;
    case Coll::kReduceScatter:
      l.count = total / n;
      l.send_count = l.count * n;
      l.recv_count = l.count;
      break;
    case Coll::kAllToAll:
      l.count = total / n;
      l.send_count = l.count * n;
      l.recv_count = l.count * n;
      break;
    case Coll::kBarrier:
      break;
  }
  // The size column is the same on every rank: the per-rank view of the larger buffer.
  const bool blocks = c == Coll::kAllGather || c == Coll::kGather || c == Coll::kScatter ||
                      c == Coll::kReduceScatter || c == Coll::kAllToAll;
  l.size_bytes = (blocks ? l.count * n : l.count) * elem;
  return l;
}

CollRunner::CollRunner(tdist::ProcessGroup& pg, Coll coll, const Options& options, size_t max_bytes)
    : pg_(pg),
      coll_(coll),
      options_(options),
      rank_(pg.rank()),
      world_(pg.size()),
      elem_(tdist::dtype_size(options.dtype)),
      in_place_(options.in_place && has_in_place(coll)) {
  pattern_.dtype = options.dtype;
  pattern_.reduction = is_reduction(coll);
  pattern_.op = options.op;
  pattern_.world = world_;
  Layout most = layout_for(coll, max_bytes, options.dtype, world_, rank_, options.root, in_place_);
  send_ = PageBuffer(most.send_count * elem_);
  recv_ = PageBuffer(most.recv_count * elem_);
}

void CollRunner::set_size(size_t bytes) {
  layout_ = layout_for(coll_, bytes, options_.dtype, world_, rank_, options_.root, in_place_);
}

unsigned char* CollRunner::send_ptr() const {
  if (!in_place_) return send_.data();
  if (coll_ == Coll::kAllGather) return block(recv_.data(), rank_);
  return recv_.data();
}

unsigned char* CollRunner::block(unsigned char* base, int index) const {
  if (base == nullptr) return nullptr;
  return base + static_cast<size_t>(index) * layout_.count * elem_;
}

void CollRunner::fill() {
  const Layout& l = layout_;
  const DType d = options_.dtype;
  // Poison first: in-place inputs are then written over their part of the output.
  if (recv_.data() != nullptr && l.recv_count > 0) fill_poison(recv_.data(), l.recv_count, d);
  switch (coll_) {
    case Coll::kAllReduce:
    case Coll::kReduce:
    case Coll::kAllGather:
    case Coll::kGather:
    case Coll::kSendRecv:
      fill_inputs(send_ptr(), l.count, pattern_, rank_, 0);
      break;
    case Coll::kBroadcast:
      if (rank_ == options_.root) fill_inputs(recv_.data(), l.count, pattern_, rank_, 0);
      break;
    case Coll::kScatter:
      if (rank_ == options_.root) {
        for (int q = 0; q < world_; ++q) {
          fill_inputs(block(send_.data(), q), l.count, pattern_, q, 0);
        }
      }
      break;
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
      fill_inputs(send_.data(), l.send_count, pattern_, rank_, 0);
      break;
    case Coll::kBarrier:
      break;
  }
}

void CollRunner::run_once() {
  const Layout& l = layout_;
  const DType d = options_.dtype;
  const int root = options_.root;
  tdist::ReduceOp op(options_.op);
  if (options_.op == tdist::ReduceOpKind::kPremulSum)
    op = tdist::ReduceOp::premul_sum(kPremulScale);
  const unsigned char* s = send_ptr();
  unsigned char* r = recv_.data();
  // Blocking calls, as MPI_Allreduce and torch's synchronous ones: the collective may run
  // inside the call (process_group.h's WaitsAtOnce).
  const tdist::WaitsAtOnce at_once(coll_ != Coll::kSendRecv);
  switch (coll_) {
    case Coll::kAllReduce:
      pg_.all_reduce(s, r, l.count, d, op)->wait();
      return;
    case Coll::kBroadcast:
      pg_.broadcast(r, l.count, d, root)->wait();
      return;
    case Coll::kReduce:
      pg_.reduce(s, r, l.count, d, op, root)->wait();
      return;
    case Coll::kAllGather:
      pg_.all_gather(s, r, l.count, d)->wait();
      return;
    case Coll::kGather:
      pg_.gather(s, r, l.count, d, root)->wait();
      return;
    case Coll::kScatter:
      pg_.scatter(s, r, l.count, d, root)->wait();
      return;
    case Coll::kReduceScatter:
      pg_.reduce_scatter(s, r, l.count, d, op)->wait();
      return;
    case Coll::kAllToAll:
      pg_.all_to_all(s, r, l.count, d)->wait();
      return;
    case Coll::kSendRecv: {
      if (world_ == 1) {  // a ring of one: the message goes to itself
        if (l.count > 0) std::memcpy(r, s, l.count * elem_);
        return;
      }
      const int next = (rank_ + 1) % world_;
      const int prev = (rank_ + world_ - 1) % world_;
      tdist::WorkPtr recv = pg_.irecv(r, l.count, d, prev);
      tdist::WorkPtr send = pg_.isend(s, l.count, d, next);
      send->wait();
      recv->wait();
      return;
    }
    case Coll::kBarrier:
      pg_.barrier()->wait();
      return;
  }
}

int64_t CollRunner::count_wrong_elements() const {
  const Layout& l = layout_;
  const Pattern& p = pattern_;
  unsigned char* r = recv_.data();
  const bool at_root = rank_ == options_.root;
  int64_t wrong = 0;
  switch (coll_) {
    case Coll::kAllReduce:
      return count_wrong(r, l.count, p, true, 0, 0);
    case Coll::kBroadcast:
      return count_wrong(r, l.count, p, false, options_.root, 0);
    case Coll::kReduce:
      return at_root ? count_wrong(r, l.count, p, true, 0, 0) : 0;
    case Coll::kGather:
      if (!at_root) return 0;
      [[fallthrough]];
    case Coll::kAllGather:
      for (int q = 0; q < world_; ++q) wrong += count_wrong(block(r, q), l.count, p, false, q, 0);
      return wrong;
    case Coll::kScatter:
      return count_wrong(r, l.count, p, false, rank_, 0);
    case Coll::kReduceScatter:
      return count_wrong(r, l.count, p, true, 0, static_cast<size_t>(rank_) * l.count);
    case Coll::kAllToAll:
      for (int q = 0; q < world_; ++q) {
        wrong +=
            count_wrong(block(r, q), l.count, p, false, q, static_cast<size_t>(rank_) * l.count);
      }
      return wrong;
    case Coll::kSendRecv:
      return count_wrong(r, l.count, p, false, (rank_ + world_ - 1) % world_, 0);
    case Coll::kBarrier:
      return 0;
  }
  return 0;
}

}  // namespace tdist_bench
