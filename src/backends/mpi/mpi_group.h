// MpiProcessGroup: the `mpi` backend, a ProcessGroup over an MPI communicator (OpenMPI).
//
// Execution: calls are validated and numbered in call order on the calling thread by
// ProcessGroup (InvalidArgument before anything reaches MPI; this class adds MPI's int
// and tag limits), and run one at a time, in that order, as blocking MPI collectives
// (MPI_Allreduce, ...) by the group's worker thread, which sleeps on a condition
// variable between operations. A thread that waits on a Work
// whose operation has not started runs the queued operations up to it itself, and the
// worker leaves a new operation to its caller for 50 us before taking it, so
// `all_reduce(...)->wait()` costs no hand-off. Chosen by measurement (OpenMPI 4.1, two
// ranks on one host, f32 sum, 8 B): blocking MPI_Allreduce on the caller took 0.7-1.1 us,
// MPI_Iallreduce + MPI_Wait 1.6-2.6 us, a hand-off to a worker thread 15-20 us; at 16 MiB
// the non-blocking form (libnbc) was 1.5x slower than the blocking one (coll/tuned).
// Through tdist-bench, the 8 B all_reduce took 12 us with an immediate hand-off and 3.2 us
// with the 50 us claim delay. Non-blocking collectives would also progress only while
// someone calls into MPI, whereas the worker gives every Work background progress.
//
// Point-to-point calls are posted at once from the calling thread (MPI_Isend/MPI_Irecv
// on the group's communicator, user tags 0..MPI_TAG_UB); their Work completes when
// waited on (MPI_Waitall) or polled (MPI_Testall). irecv_any is MPI_Irecv from
// MPI_ANY_SOURCE, whose MPI_Status names the sender (Work::source_rank). Sub-groups are
// MPI_Comm_create_group over a second, private communicator of the parent, so only members take
// part, and nothing collides with user tags.
//
// Limits: counts and displacements are MPI ints (up to INT_MAX elements; larger is
// InvalidArgument). MPI calls have no timeout: the group timeout bounds nothing inside
// MPI (a dead rank ends the whole job through mpirun), Work::wait(deadline) still bounds
// a wait. While inside a call OpenMPI polls for progress (under oversubscription it
// yields the core between polls).
//
// Failure: an MPI error fails the operation with the tdist exception of mpi_runtime.h,
// naming rank, group, operation and sequence number, and aborts the group on this rank:
// later operations fail at once. abort() does the same locally; MPI cannot abort one
// communicator without ending the job (MPI_Abort), so peers are not told.
// Thread-safety: as ProcessGroup. Destruction lets queued operations finish, stops the
// worker and frees the communicators (unless MPI was finalized already).
#pragma once

#include <mpi.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pg/op_queue.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"

namespace tdist::backends::mpi {

class MpiProcessGroup : public ProcessGroup {
 public:
  // Takes ownership of `comm`, whose rank and size must be `rank` and `size`; sets
  // MPI_ERRORS_RETURN on it and duplicates it for sub-group creation (collective over
  // its members). Throws the mpi_runtime.h errors.
  MpiProcessGroup(MPI_Comm comm, std::shared_ptr<Store> store, int rank, int size,
                  std::chrono::milliseconds timeout, std::vector<int> global_ranks = {});
  ~MpiProcessGroup() override;

  std::string backend_name() const override { return "mpi"; }

  void abort() override;

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size,
                                              std::vector<int> global_ranks) override;

  WorkPtr do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                        ReduceOp op) override;
  WorkPtr do_broadcast(uint64_t seq, void* data, size_t count, DType dtype, int root) override;
  WorkPtr do_reduce(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                    ReduceOp op, int root) override;
  WorkPtr do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                        DType dtype) override;
  WorkPtr do_all_gatherv(uint64_t seq, const void* send, size_t send_count, void* recv,
                         std::span<const size_t> recv_counts, DType dtype) override;
  WorkPtr do_gather(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                    int root) override;
  WorkPtr do_scatter(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                     int root) override;
  WorkPtr do_reduce_scatter(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                            ReduceOp op) override;
  WorkPtr do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                        DType dtype) override;
  WorkPtr do_all_to_allv(uint64_t seq, const void* send, std::span<const size_t> send_counts,
                         void* recv, std::span<const size_t> recv_counts, DType dtype) override;
  WorkPtr do_barrier(uint64_t seq) override;
  WorkPtr do_batch_isend_irecv(std::span<const P2POp> ops) override;
  WorkPtr do_irecv_any(void* data, size_t count, DType dtype, uint32_t tag) override;

 private:
  // MPI's limits on a point-to-point op's count and tag (InvalidArgument naming `name`).
  void check_p2p_limits(const char* name, size_t count, uint32_t tag);
  // The error that aborted the group, or null.
  std::exception_ptr aborted() TDIST_EXCLUDES(mu_);
  // Queues the operation numbered `seq` (op_queue.h).
  template <typename Run>  // Run: void(MPI_Comm); defined in mpi_group.cc
  WorkPtr enqueue(uint64_t seq, const char* op, Run run);
  void execute(uint64_t seq, Work& work, const std::function<void(MPI_Comm)>& run);

  MPI_Comm comm_ = MPI_COMM_NULL;  // collectives and user point-to-point
  MPI_Comm ctl_ = MPI_COMM_NULL;   // sub-group creation only

  Mutex mu_;
  std::exception_ptr aborted_ TDIST_GUARDED_BY(mu_);  // the error that aborted the group
  pg::OpQueue ops_;  // stopped (drained) in the destructor, before comm_ is freed
};

}  // namespace tdist::backends::mpi
