// MpiProcessGroup (mpi_group.h): the ordered worker and the collectives.
#include "backends/mpi/mpi_group.h"

#include <climits>
#include <cstring>
#include <numeric>
#include <utility>

#include "backends/mpi/mpi_runtime.h"
#include "core/reduce_kernels.h"
#include "diag/error_context.h"
#include "tdist/error.h"

namespace tdist::backends::mpi {
namespace {

// How long a queued operation waits for its caller before the worker takes it.
constexpr std::chrono::microseconds kClaimDelay(50);

size_t bytes_of(size_t count, DType dtype) { return count * dtype_size(dtype); }

int to_int(const char* op, const char* what, size_t n) {
  TDIST_CHECK(n <= static_cast<size_t>(INT_MAX), InvalidArgument, op, ": ", what, " ", n,
              " exceeds MPI's int range (", INT_MAX, " elements)");
  return static_cast<int>(n);
}

// MPI counts and displacements of back-to-back blocks.
struct Layout {
  std::vector<int> counts;
  std::vector<int> displs;
  size_t total = 0;
};

Layout layout(const char* op, std::span<const size_t> counts) {
  Layout out;
  for (size_t c : counts) {
    out.counts.push_back(to_int(op, "count", c));
    out.displs.push_back(to_int(op, "displacement", out.total));
    out.total += c;
  }
  return out;
}

// The send side of a reduction: premul_sum multiplies a private copy (the caller's
// buffer stays untouched), the in-place form is MPI_IN_PLACE where MPI allows it.
class ReduceInput {
 public:
  ReduceInput(const void* send, const void* recv, size_t count, DType dtype, ReduceOp op,
              bool in_place_allowed) {
    if (op.kind == ReduceOpKind::kPremulSum) {
      const auto* p = static_cast<const uint8_t*>(send);
      copy_.assign(p, p + bytes_of(count, dtype));
      core::premultiply(copy_.data(), count, dtype, op);
      ptr_ = copy_.data();
    } else if (in_place_allowed && send == recv) {
      ptr_ = MPI_IN_PLACE;
    } else {
      ptr_ = send;
    }
  }
  const void* get() const { return ptr_; }

 private:
  std::vector<uint8_t> copy_;
  const void* ptr_ = nullptr;
};

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::shared_ptr<Store> store, int rank, int size,
                                 std::chrono::milliseconds timeout, std::vector<int> global_ranks)
    : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)),
      comm_(comm),
      // An MPI call cannot stop at a caller's deadline: only callers that wait without
      // one run queued operations.
      ops_(kClaimDelay, std::chrono::milliseconds::max()) {
  try {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int mpi_rank = -1;
    int mpi_size = -1;
    check(MPI_Comm_rank(comm_, &mpi_rank), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &mpi_size), "MPI_Comm_size");
    TDIST_CHECK(mpi_rank == rank && mpi_size == size, Error,
                "mpi backend: the communicator has rank ", mpi_rank, " of ", mpi_size,
                ", expected rank ", rank, " of ", size);
    check(MPI_Comm_dup(comm_, &ctl_), "MPI_Comm_dup");
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiProcessGroup::~MpiProcessGroup() {
  ops_.stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) {
    MPI_Comm_free(&ctl_);
    MPI_Comm_free(&comm_);
  }
}

template <typename Run>
WorkPtr MpiProcessGroup::enqueue(uint64_t seq, const char* op, Run run) {
  auto call = [this, run = std::move(run)](uint64_t n, Work& work) {
    execute(n, work, std::cref(run));
  };
  auto work =
      std::make_shared<pg::QueuedCall<decltype(call)>>(op, weak_from_this(), ops_, std::move(call));
  ops_.push(seq, work);
  return work;
}

void MpiProcessGroup::execute(uint64_t seq, Work& work, const std::function<void(MPI_Comm)>& run) {
  const std::string where = diag::describe(rank(), size(), "mpi", work.op(), seq);
  std::exception_ptr earlier;
  {
    MutexLock lock(mu_);
    earlier = aborted_;
  }
  if (earlier) {
    earlier = diag::add_context(earlier, where + ": the group was aborted earlier: ");
    note_finished(seq, earlier);
    work.finish(earlier);
    return;
  }
  note_started(seq);
  try {
    run(comm_);
    note_finished(seq, nullptr, "mpi");
    work.finish();
  } catch (...) {
    std::exception_ptr error = diag::add_context(std::current_exception(), where + ": ");
    {
      MutexLock lock(mu_);
      if (!aborted_) aborted_ = error;
    }
    note_finished(seq, error, "mpi");
    work.finish(error);
  }
}

WorkPtr MpiProcessGroup::do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                       DType dtype, ReduceOp op) {
  const int n = to_int("all_reduce", "count", count);
  const int world = size();
  return enqueue(seq, "all_reduce", [=](MPI_Comm comm) {
    ReduceInput in(send, recv, count, dtype, op, /*in_place_allowed=*/true);
    check(MPI_Allreduce(in.get(), recv, n, datatype(dtype), reduce_op(dtype, op.kind), comm),
          "MPI_Allreduce");
    core::finish(recv, count, dtype, op, world);
  });
}

WorkPtr MpiProcessGroup::do_broadcast(uint64_t seq, void* data, size_t count, DType dtype,
                                      int root) {
  const int n = to_int("broadcast", "count", count);
  return enqueue(seq, "broadcast", [=](MPI_Comm comm) {
    check(MPI_Bcast(data, n, datatype(dtype), root, comm), "MPI_Bcast");
  });
}

WorkPtr MpiProcessGroup::do_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                   DType dtype, ReduceOp op, int root) {
  const bool is_root = rank() == root;
  const int n = to_int("reduce", "count", count);
  const int world = size();
  return enqueue(seq, "reduce", [=](MPI_Comm comm) {
    // MPI_IN_PLACE is the root's only; elsewhere recv is not significant (may be null).
    ReduceInput in(send, recv, count, dtype, op, /*in_place_allowed=*/is_root);
    check(MPI_Reduce(in.get(), recv, n, datatype(dtype), reduce_op(dtype, op.kind), root, comm),
          "MPI_Reduce");
    if (is_root) core::finish(recv, count, dtype, op, world);
  });
}

WorkPtr MpiProcessGroup::do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                       DType dtype) {
  const int n = to_int("all_gather", "count", count);
  to_int("all_gather", "total count", count * static_cast<size_t>(size()));
  const void* mine = static_cast<const uint8_t*>(recv) + bytes_of(count, dtype) * rank();
  const void* src = count != 0 && send == mine ? MPI_IN_PLACE : send;
  return enqueue(seq, "all_gather", [=](MPI_Comm comm) {
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Allgather(src, n, t, recv, n, t, comm), "MPI_Allgather");
  });
}

WorkPtr MpiProcessGroup::do_all_gatherv(uint64_t seq, const void* send, size_t send_count,
                                        void* recv, std::span<const size_t> recv_counts,
                                        DType dtype) {
  const size_t me = static_cast<size_t>(rank());
  Layout l = layout("all_gatherv", recv_counts);
  const void* mine =
      static_cast<const uint8_t*>(recv) + bytes_of(static_cast<size_t>(l.displs[me]), dtype);
  const void* src = send_count != 0 && send == mine ? MPI_IN_PLACE : send;
  return enqueue(seq, "all_gatherv", [=, l = std::move(l)](MPI_Comm comm) {
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Allgatherv(src, l.counts[me], t, recv, l.counts.data(), l.displs.data(), t, comm),
          "MPI_Allgatherv");
  });
}

WorkPtr MpiProcessGroup::do_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                   DType dtype, int root) {
  const bool is_root = rank() == root;
  const int n = to_int("gather", "count", count);
  to_int("gather", "total count", count * static_cast<size_t>(size()));
  const void* mine =
      is_root ? static_cast<const uint8_t*>(recv) + bytes_of(count, dtype) * root : nullptr;
  const void* src = is_root && count != 0 && send == mine ? MPI_IN_PLACE : send;
  return enqueue(seq, "gather", [=](MPI_Comm comm) {
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Gather(src, n, t, recv, n, t, root, comm), "MPI_Gather");
  });
}

WorkPtr MpiProcessGroup::do_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, int root) {
  const bool is_root = rank() == root;
  const int n = to_int("scatter", "count", count);
  to_int("scatter", "total count", count * static_cast<size_t>(size()));
  const void* mine =
      is_root ? static_cast<const uint8_t*>(send) + bytes_of(count, dtype) * root : nullptr;
  void* dst = is_root && count != 0 && recv == mine ? MPI_IN_PLACE : recv;
  return enqueue(seq, "scatter", [=](MPI_Comm comm) {
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Scatter(send, n, t, dst, n, t, root, comm), "MPI_Scatter");
  });
}

WorkPtr MpiProcessGroup::do_reduce_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                           DType dtype, ReduceOp op) {
  const int n = to_int("reduce_scatter", "count", count);
  const size_t all = count * static_cast<size_t>(size());
  to_int("reduce_scatter", "total count", all);
  const int world = size();
  return enqueue(seq, "reduce_scatter", [=](MPI_Comm comm) {
    ReduceInput in(send, recv, all, dtype, op, /*in_place_allowed=*/false);
    check(MPI_Reduce_scatter_block(in.get(), recv, n, datatype(dtype), reduce_op(dtype, op.kind),
                                   comm),
          "MPI_Reduce_scatter_block");
    core::finish(recv, count, dtype, op, world);
  });
}

// MPI forbids overlapping send and recv buffers: an in-place exchange sends from a copy.
namespace {
const void* unaliased(const void* send, const void* recv, size_t bytes,
                      std::vector<uint8_t>& copy) {
  if (send != recv || bytes == 0) return send;
  const auto* p = static_cast<const uint8_t*>(send);
  copy.assign(p, p + bytes);
  return copy.data();
}
}  // namespace

WorkPtr MpiProcessGroup::do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                                       DType dtype) {
  const int n = to_int("all_to_all", "count", count);
  const size_t all = count * static_cast<size_t>(size());
  to_int("all_to_all", "total count", all);
  return enqueue(seq, "all_to_all", [=](MPI_Comm comm) {
    std::vector<uint8_t> copy;
    const void* src = unaliased(send, recv, bytes_of(all, dtype), copy);
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Alltoall(src, n, t, recv, n, t, comm), "MPI_Alltoall");
  });
}

WorkPtr MpiProcessGroup::do_all_to_allv(uint64_t seq, const void* send,
                                        std::span<const size_t> send_counts, void* recv,
                                        std::span<const size_t> recv_counts, DType dtype) {
  Layout s = layout("all_to_allv", send_counts);
  Layout r = layout("all_to_allv", recv_counts);
  return enqueue(seq, "all_to_allv", [=, s = std::move(s), r = std::move(r)](MPI_Comm comm) {
    std::vector<uint8_t> copy;
    const void* src = unaliased(send, recv, bytes_of(s.total, dtype), copy);
    const MPI_Datatype t = datatype(dtype);
    check(MPI_Alltoallv(src, s.counts.data(), s.displs.data(), t, recv, r.counts.data(),
                        r.displs.data(), t, comm),
          "MPI_Alltoallv");
  });
}

WorkPtr MpiProcessGroup::do_barrier(uint64_t seq) {
  return enqueue(seq, "barrier", [](MPI_Comm comm) { check(MPI_Barrier(comm), "MPI_Barrier"); });
}

void MpiProcessGroup::abort() {
  MutexLock lock(mu_);
  if (aborted_) return;
  aborted_ =
      std::make_exception_ptr(PeerError(diag::describe(rank(), size(), "mpi", "abort", next_seq()) +
                                        ": the group was aborted by the user"));
}

}  // namespace tdist::backends::mpi
