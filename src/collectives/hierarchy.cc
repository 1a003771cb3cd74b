// SubComm, Hosts and the phase helpers of the hierarchical algorithms (hierarchy.h).
#include "collectives/hierarchy.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/polling.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::coll::detail {

SubComm::SubComm(transport::Comm& parent, std::vector<int> ranks, uint32_t phase)
    : parent_(parent), ranks_(std::move(ranks)), phase_(phase) {
  TDIST_CHECK(phase >= 1 && phase <= kMaxPhase, InvalidArgument, "SubComm: phase ", phase,
              " is outside 1..", kMaxPhase);
  const auto it = std::find(ranks_.begin(), ranks_.end(), parent.rank());
  TDIST_CHECK(it != ranks_.end(), InvalidArgument, "SubComm: rank ", parent.rank(),
              " is not in the view");
  rank_ = static_cast<int>(it - ranks_.begin());
}

int SubComm::parent_rank(int peer) const {
  TDIST_CHECK(peer >= 0 && peer < size(), InvalidArgument, "SubComm: peer ", peer,
              " is outside 0..", size() - 1);
  return ranks_[static_cast<size_t>(peer)];
}

uint64_t SubComm::parent_tag(uint64_t tag) const {
  constexpr uint64_t kStepMask = (uint64_t{1} << 24) - 1;
  constexpr uint64_t kInnerMask = (uint64_t{1} << kPhaseShift) - 1;
  TDIST_CHECK((tag & transport::kP2PTagBit) == 0 && (tag & kStepMask & ~kInnerMask) == 0,
              InvalidArgument, "SubComm: tag ", tag, " is not a collective tag with a step below ",
              kInnerMask + 1);
  return (tag & ~kStepMask) | (uint64_t{phase_} << kPhaseShift) | (tag & kInnerMask);
}

transport::RequestPtr SubComm::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  return parent_.isend(parent_rank(peer), parent_tag(tag), data, bytes);
}

transport::RequestPtr SubComm::irecv(int peer, uint64_t tag, void* data, size_t bytes) {
  return parent_.irecv(parent_rank(peer), parent_tag(tag), data, bytes);
}

bool SubComm::carries_device(int peer) const {
  return peer >= 0 && peer < size() && parent_.carries_device(parent_rank(peer));
}

transport::RequestPtr SubComm::isend_device(int peer, uint64_t tag, const void* data,
                                            size_t bytes) {
  return parent_.isend_device(parent_rank(peer), parent_tag(tag), data, bytes);
}

transport::RequestPtr SubComm::irecv_device(int peer, uint64_t tag, void* data, size_t bytes) {
  return parent_.irecv_device(parent_rank(peer), parent_tag(tag), data, bytes);
}

Ctx phase_ctx(const Ctx& ctx, SubComm& view) {
  CollectiveSettings settings;
  settings.chunk_bytes = ctx.settings.chunk_bytes;
  return Ctx{view, ctx.seq, ctx.deadline, settings, nullptr, ctx.memory, ctx.device};
}

Hosts Hosts::of(const transport::Comm& comm) {
  const transport::Topology& t = comm.topology();
  const int n = comm.size();
  Hosts h;
  if (!t.known()) {
    h.ranks.emplace_back(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) h.ranks[0][static_cast<size_t>(r)] = r;
  } else {
    TDIST_CHECK(t.host_of.size() == static_cast<size_t>(n), InvalidArgument, "topology of ",
                t.host_of.size(), " ranks for a group of ", n);
    h.ranks.resize(static_cast<size_t>(t.num_hosts()));
    for (int r = 0; r < n; ++r) h.ranks[static_cast<size_t>(t.host_of[r])].push_back(r);
  }
  for (const auto& on : h.ranks) {
    TDIST_CHECK(!on.empty(), InvalidArgument, "topology: a host without ranks");
    h.uniform = h.uniform && on.size() == h.ranks[0].size();
  }
  h.host = h.host_of(comm.rank());
  h.local = h.local_of(comm.rank());
  return h;
}

std::vector<int> Hosts::column(int i) const {
  std::vector<int> out;
  for (const auto& on : ranks) {
    if (static_cast<size_t>(i) < on.size()) out.push_back(on[static_cast<size_t>(i)]);
  }
  return out;
}

std::vector<int> Hosts::representatives(int root) const {
  std::vector<int> out;
  for (const auto& on : ranks) out.push_back(on.front());
  out[static_cast<size_t>(host_of(root))] = root;
  return out;
}

int Hosts::host_of(int rank) const {
  for (size_t h = 0; h < ranks.size(); ++h) {
    if (std::binary_search(ranks[h].begin(), ranks[h].end(), rank)) return static_cast<int>(h);
  }
  TDIST_THROW(InvalidArgument, "topology: rank ", rank, " is on no host");
}

int Hosts::local_of(int rank) const {
  const auto& on = ranks[static_cast<size_t>(host_of(rank))];
  return static_cast<int>(std::lower_bound(on.begin(), on.end(), rank) - on.begin());
}

ReduceOp first_phase_op(ReduceOp op) {
  return op.kind == ReduceOpKind::kAvg ? ReduceOp(ReduceOpKind::kSum) : op;
}

ReduceOp later_phase_op(ReduceOp op) {
  return op.kind == ReduceOpKind::kAvg || op.kind == ReduceOpKind::kPremulSum
             ? ReduceOp(ReduceOpKind::kSum)
             : op;
}

namespace {

// What the two threads of run_overlapped share.
struct Overlap {
  Mutex mu;
  CondVar cv;
  size_t ready TDIST_GUARDED_BY(mu) = 0;  // segments whose before() returned
  size_t done TDIST_GUARDED_BY(mu) = 0;   // segments whose middle() returned
  std::exception_ptr error TDIST_GUARDED_BY(mu);

  // Records the first failure, aborts the Comm with it and wakes the other thread.
  void fail(transport::Comm& comm, std::exception_ptr e) {
    {
      MutexLock lock(mu);
      if (!error) error = e;
    }
    comm.abort(std::move(e));
    cv.notify_all();
  }
  void advance(size_t Overlap::*counter, size_t value) {
    {
      MutexLock lock(mu);
      this->*counter = value;
    }
    cv.notify_all();
  }
  // Waits until `counter` > k; false when a failure came first.
  bool await(size_t Overlap::*counter, size_t k) {
    MutexLock lock(mu);
    while (this->*counter <= k && !error) cv.wait(mu);
    return !error;
  }
  std::exception_ptr first_error() {
    MutexLock lock(mu);
    return error;
  }
};

}  // namespace

void run_overlapped(transport::Comm& comm, core::HelperThread* helper, size_t n,
                    const std::function<void(size_t)>& before,
                    const std::function<void(size_t)>& middle,
                    const std::function<void(size_t)>& after) {
  if (helper == nullptr) {
    for (size_t k = 0; k < n; ++k) {
      before(k);
      middle(k);
      after(k);
    }
    return;
  }
  if (n == 0) return;
  Overlap overlap;
  const bool background = core::on_background_thread();
  helper->start([&] {
    std::optional<core::BackgroundThread> mark;
    if (background) mark.emplace();
    try {
      for (size_t k = 0; k < n; ++k) {
        if (!overlap.await(&Overlap::ready, k)) return;
        middle(k);
        overlap.advance(&Overlap::done, k + 1);
      }
    } catch (...) {
      overlap.fail(comm, std::current_exception());
    }
  });
  try {
    for (size_t k = 0; k <= n; ++k) {
      if (k < n) {
        before(k);
        overlap.advance(&Overlap::ready, k + 1);
      }
      if (k >= 1) {
        if (!overlap.await(&Overlap::done, k - 1)) break;
        after(k - 1);
      }
    }
  } catch (...) {
    overlap.fail(comm, std::current_exception());
  }
  helper->join();
  if (std::exception_ptr e = overlap.first_error()) std::rethrow_exception(e);
}

}  // namespace tdist::coll::detail
