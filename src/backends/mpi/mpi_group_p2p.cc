// MpiProcessGroup's point-to-point operations and sub-groups (mpi_group.h).
//
// Point-to-point: posted at once (MPI_Isend/MPI_Irecv); the Work owns the requests and
// completes them when waited on or polled: MPI_Waitall without a deadline, MPI_Testall
// with short sleeps (10 us doubling to 1 ms) until a caller's deadline, so a bounded wait
// never holds a core. Unlike a collective, a failed point-to-point operation (say a
// message longer than the receive buffer: DesyncError) does not abort the group.
#include <algorithm>
#include <climits>
#include <thread>
#include <utility>

#include "backends/mpi/mpi_group.h"
#include "backends/mpi/mpi_runtime.h"
#include "diag/error_context.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::backends::mpi {
namespace {

// `receive`: the one request is a receive, whose MPI_Status names its source.
class RequestWork : public Work {
 public:
  RequestWork(const char* op, std::string where, std::vector<MPI_Request> requests,
              bool receive = false)
      : Work(op), where_(std::move(where)), requests_(std::move(requests)), receive_(receive) {}

  ~RequestWork() override {
    // A Work dropped unfinished leaves its requests to MPI, which completes them when the
    // peers' operations match; never blocking here (the buffers must still outlive them,
    // as for any operation).
    MutexLock lock(mu_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (settled_ || finalized != 0) return;
    for (MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }

 protected:
  void poll(Deadline deadline) override {
    if (deadline.is_never()) {
      mu_.lock();
    } else if (!mu_.try_lock()) {
      return;  // another thread is completing it; Work::wait waits for its finish()
    }
    MutexLock lock(mu_, std::adopt_lock);
    if (settled_) return;
    const int n = static_cast<int>(requests_.size());
    std::vector<MPI_Status> statuses(requests_.size());
    int rc = MPI_SUCCESS;
    if (deadline.is_never()) {
      rc = MPI_Waitall(n, requests_.data(), statuses.data());
    } else {
      auto pause = std::chrono::microseconds(10);
      for (;;) {
        int done = 0;
        rc = MPI_Testall(n, requests_.data(), &done, statuses.data());
        if (rc != MPI_SUCCESS || done != 0) break;
        if (deadline.expired()) return;
        std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline.remaining()));
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
    settled_ = true;
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : statuses) {
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) rc = s.MPI_ERROR;
      }
    }
    try {
      check(rc, n == 1 ? "MPI_Wait" : "MPI_Waitall");
      if (receive_) set_source_rank(statuses.front().MPI_SOURCE);
      finish();
    } catch (...) {
      finish(diag::add_context(std::current_exception(), where_ + ": "));  // keeps check()'s type
    }
  }

 private:
  const std::string where_;
  Mutex mu_;
  std::vector<MPI_Request> requests_ TDIST_GUARDED_BY(mu_);
  bool settled_ TDIST_GUARDED_BY(mu_) = false;  // requests completed or failed
  const bool receive_;
};

}  // namespace

void MpiProcessGroup::check_p2p_limits(const char* name, size_t count, uint32_t tag) {
  int* tag_ub = nullptr;
  int has_ub = 0;
  check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &has_ub), "MPI_Comm_get_attr");
  const int64_t max_tag = has_ub != 0 && tag_ub != nullptr ? *tag_ub : 32767;
  TDIST_CHECK(count <= static_cast<size_t>(INT_MAX), InvalidArgument, name, ": count ", count,
              " exceeds MPI's int range (", INT_MAX, " elements)");
  TDIST_CHECK(static_cast<int64_t>(tag) <= max_tag, InvalidArgument, name, ": tag ", tag,
              " exceeds this MPI's tag bound MPI_TAG_UB=", max_tag);
}

std::exception_ptr MpiProcessGroup::aborted() {
  MutexLock lock(mu_);
  return aborted_;
}

WorkPtr MpiProcessGroup::do_batch_isend_irecv(std::span<const P2POp> ops) {
  const char* name = p2p_name(ops);
  for (const P2POp& op : ops) check_p2p_limits(name, op.count, op.tag);
  if (std::exception_ptr error = aborted()) return completed_work(name, error);
  std::vector<MPI_Request> requests;
  requests.reserve(ops.size());
  try {
    for (const P2POp& op : ops) {
      MPI_Request r = MPI_REQUEST_NULL;
      const int n = static_cast<int>(op.count);
      const int tag = static_cast<int>(op.tag);
      if (op.kind == P2POp::Kind::kSend) {
        check(MPI_Isend(op.data, n, datatype(op.dtype), op.peer, tag, comm_, &r), "MPI_Isend");
      } else {
        check(MPI_Irecv(op.data, n, datatype(op.dtype), op.peer, tag, comm_, &r), "MPI_Irecv");
      }
      requests.push_back(r);
    }
  } catch (...) {
    // Those already posted are left to MPI, as for a dropped Work.
    for (MPI_Request& r : requests) MPI_Request_free(&r);
    throw;
  }
  const std::string where = detail::str_cat("rank ", rank(), "/", size(), " (mpi) ", name);
  const bool receive = ops.size() == 1 && ops[0].kind == P2POp::Kind::kRecv;
  return std::make_shared<RequestWork>(name, where, std::move(requests), receive);
}

WorkPtr MpiProcessGroup::do_irecv_any(void* data, size_t count, DType dtype, uint32_t tag) {
  constexpr const char* kName = "irecv_any";
  check_p2p_limits(kName, count, tag);
  if (std::exception_ptr error = aborted()) return completed_work(kName, error);
  MPI_Request r = MPI_REQUEST_NULL;
  check(MPI_Irecv(data, static_cast<int>(count), datatype(dtype), MPI_ANY_SOURCE,
                  static_cast<int>(tag), comm_, &r),
        "MPI_Irecv");
  const std::string where = detail::str_cat("rank ", rank(), "/", size(), " (mpi) ", kName);
  return std::make_shared<RequestWork>(kName, where, std::vector<MPI_Request>{r},
                                       /*receive=*/true);
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::make_subgroup(std::shared_ptr<Store> store, int rank,
                                                             int size,
                                                             std::vector<int> global_ranks) {
  // Members in new-rank order, as ranks of this group.
  std::vector<int> members;
  members.reserve(global_ranks.size());
  for (int g : global_ranks) members.push_back(group_rank(g));
  MPI_Group parent = MPI_GROUP_NULL;
  MPI_Group chosen = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_group(ctl_, &parent), "MPI_Comm_group");
  int rc = MPI_Group_incl(parent, size, members.data(), &chosen);
  MPI_Group_free(&parent);
  check(rc, "MPI_Group_incl");
  // Only members call this, one creation at a time per group (sub-group calls are
  // collective and ordered), so one tag on the private communicator suffices.
  rc = MPI_Comm_create_group(ctl_, chosen, /*tag=*/0, &comm);
  MPI_Group_free(&chosen);
  check(rc, "MPI_Comm_create_group");
  return std::make_shared<MpiProcessGroup>(comm, std::move(store), rank, size, timeout(),
                                           std::move(global_ranks));
}

}  // namespace tdist::backends::mpi
