// CommProcessGroup: a ProcessGroup over any transport::Comm, running the algorithms of
// src/collectives. The tcp, shm and auto backends are this class with their own
// CommFactory.
//
// Execution: collectives are validated and numbered in call order on the calling thread
// by ProcessGroup (InvalidArgument before anything is sent; the sequence number tags
// every message), and run one at a time, in that order, by the group's OpQueue (op_queue.h): its
// worker thread, which blocks (never spins) while it waits, or a thread that waits on a Work whose
// operation has not started, which runs the queued operations up to it itself, so the common
// `all_reduce(...)->wait()` costs no hand-off between threads. Inside a WaitsAtOnce scope
// (process_group.h) a collective issued while the queue is idle is not queued at all: the
// queue is reserved for it and the issuing call runs it before it returns a finished Work.
// Point-to-point operations go to the transport directly from the calling thread and complete
// inside it; so do receives from any source (transport::Comm::irecv_any).
//
// Checks: each operation tells the Comm its fingerprint before it runs
// (Comm::begin_collective), so ranks that call different operations, or the same one with
// other arguments, fail with DesyncError naming both sides.
// Failure: an operation that fails aborts the Comm, so every pending and later
// operation of the group fails with the same error on this rank, and the peers notice
// the closed connections. Errors name the rank, the operation and its sequence number.
// Device memory: a group given a CommDevice (comm_device.h; the cuda_ipc backend) takes
// device buffers only (memory_kinds()), runs the algorithms with the device's kernels and
// posts device messages; its Works are DeviceWorks.
// Split: a group split from this one runs on its Comm (transport/context_comm.h); its
// abort, or a failure of its own operation, aborts its context alone.
// Destruction lets queued operations finish (the group timeout bounds them), then stops
// the worker and closes the transport.
#pragma once

#include <array>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/comm/comm_device.h"
#include "collectives/context.h"
#include "collectives/settings.h"
#include "core/op_fingerprint.h"
#include "pg/op_queue.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"
#include "transport/comm.h"

namespace tdist::backends {

using CommFactory = std::function<std::unique_ptr<transport::Comm>(
    std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)>;

class CommProcessGroup : public ProcessGroup {
 public:
  // Connects the transport through `store` (blocking until every rank joined or the
  // timeout passed), unless given its `comm` (a split's), and starts the worker.
  CommProcessGroup(std::string backend, CommFactory factory, std::shared_ptr<Store> store, int rank,
                   int size, std::chrono::milliseconds timeout, std::vector<int> global_ranks = {},
                   std::shared_ptr<CommDevice> device = nullptr,
                   std::shared_ptr<transport::Comm> comm = nullptr);
  ~CommProcessGroup() override;

  std::string backend_name() const override { return backend_; }
  unsigned memory_kinds() const override {
    return memory_bit(device_ ? device_->memory() : MemoryKind::kHost);
  }

  void abort() override;

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size,
                                              std::vector<int> global_ranks) override;
  // On this group's Comm, in a context of its own (transport/context_comm.h), when it can.
  std::shared_ptr<ProcessGroup> make_split_subgroup(std::shared_ptr<Store> store,
                                                    const std::vector<int>& members,
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
  // Queues the operation numbered `seq` (op_queue.h), checked by the fingerprint
  // ProcessGroup numbered it with (issuing_fingerprint()).
  // A host group's caller that waits at once, with nothing queued or running, runs the
  // operation inside the call instead and gets a finished Work (a shared one per
  // operation on success: a finished Work never changes).
  template <typename Run>  // Run: void(const coll::Ctx&); defined in comm_group.cc
  WorkPtr enqueue(uint64_t seq, Run run);
  // Runs operation `seq` on this thread; returns its error (null: done). A device group's
  // `work` gets the device's completion event before it finishes (null: none to set).
  std::exception_ptr execute(uint64_t seq, const core::OpFingerprint& fp, const char* op,
                             pg::QueuedWork* work,
                             const std::function<void(const coll::Ctx&)>& run);
  // The error operation `seq` failed with, as the group reports it from now on: a
  // TimeoutError names the ranks that never arrived (status.h); a DesyncError is left in
  // the store for the peers; a PeerError becomes a DesyncError when a peer left one there
  // (its abort notice may not have arrived before the connection broke).
  std::exception_ptr settle(uint64_t seq, std::exception_ptr error);
  std::exception_ptr failure() const;  // the first settled error, or null
  static coll::CollectiveSettings device_settings(coll::CollectiveSettings s) {
    if (!s.chunk_given) {
      s.chunk_bytes = kDeviceChunkBytes;
      s.chunk_given = true;
    }
    return s;
  }

  const std::string backend_;
  const CommFactory factory_;
  const std::shared_ptr<CommDevice> device_;
  std::shared_ptr<transport::Comm> comm_;  // shared with the groups split from this one
  // TDIST_ALGO and TDIST_CHUNK_BYTES, resolved once when the group is made (constructor).
  const coll::CollectiveSettings settings_;
  // A device group's: kDeviceChunkBytes unless a chunk size was given (comm_device.h).
  const coll::CollectiveSettings device_settings_;
  mutable Mutex failure_mu_;
  std::exception_ptr failure_ TDIST_GUARDED_BY(failure_mu_);
  // The second thread the collectives may use (collectives/context.h), started by the first
  // operation that overlaps two phases; it outlives ops_, whose worker lends it.
  core::HelperThread helper_;
  pg::OpQueue ops_;  // after comm_: stopped (drained) in the destructor, before comm_ goes
  // The finished Work of each kind of operation run inside its call (enqueue), made once,
  // by core::OpKind; touched only while the queue is reserved (OpQueue::reserve).
  std::array<WorkPtr, static_cast<size_t>(core::OpKind::kBarrier) + 1> done_;
};

}  // namespace tdist::backends
