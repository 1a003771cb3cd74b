// CommProcessGroup: a ProcessGroup over any transport::Comm, running the algorithms of
// src/collectives. The tcp, shm and auto backends are this class with their own
// CommFactory.
//
// Execution: collectives are validated on the calling thread (InvalidArgument before
// anything is sent), numbered in call order (the sequence number tags every message),
// and run one at a time, in that order, by the group's OpQueue (op_queue.h): its worker
// thread, which blocks (never spins) while it waits, or a thread that waits on a Work
// whose operation has not started, which runs the queued operations up to it itself, so
// the common `all_reduce(...)->wait()` costs no hand-off between threads. Point-to-point
// operations go to the transport directly from the calling thread and complete inside it.
//
// Failure: an operation that fails aborts the Comm, so every pending and later
// operation of the group fails with the same error on this rank, and the peers notice
// the closed connections. Errors name the rank, the operation and its sequence number.
// Destruction lets queued operations finish (the group timeout bounds them), then stops
// the worker and closes the transport.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/op_queue.h"
#include "collectives/context.h"
#include "tdist/process_group.h"
#include "transport/comm.h"

namespace tdist::backends {

using CommFactory = std::function<std::unique_ptr<transport::Comm>(
    std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)>;

class CommProcessGroup : public ProcessGroup {
 public:
  // Connects the transport through `store` (blocking until every rank joined or the
  // timeout passed) and starts the worker.
  CommProcessGroup(std::string backend, CommFactory factory, std::shared_ptr<Store> store, int rank,
                   int size, std::chrono::milliseconds timeout, std::vector<int> global_ranks = {});
  ~CommProcessGroup() override;

  std::string backend_name() const override { return backend_; }

  WorkPtr all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  using ProcessGroup::all_reduce;
  WorkPtr broadcast(void* data, size_t count, DType dtype, int root) override;
  WorkPtr reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                 int root) override;
  WorkPtr all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  WorkPtr all_gatherv(const void* send, size_t send_count, void* recv,
                      std::span<const size_t> recv_counts, DType dtype) override;
  WorkPtr gather(const void* send, void* recv, size_t count, DType dtype, int root) override;
  WorkPtr scatter(const void* send, void* recv, size_t count, DType dtype, int root) override;
  WorkPtr reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                         ReduceOp op) override;
  WorkPtr all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  WorkPtr all_to_allv(const void* send, std::span<const size_t> send_counts, void* recv,
                      std::span<const size_t> recv_counts, DType dtype) override;
  WorkPtr barrier() override;

  WorkPtr isend(const void* data, size_t count, DType dtype, int dst, uint32_t tag) override;
  WorkPtr irecv(void* data, size_t count, DType dtype, int src, uint32_t tag) override;
  WorkPtr batch_isend_irecv(std::span<const P2POp> ops) override;

  void abort() override;

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank, int size,
                                              std::vector<int> global_ranks) override;

 private:
  // Numbers the operation and queues it (op_queue.h).
  WorkPtr enqueue(const char* op, std::function<void(const coll::Ctx&)> run);
  void execute(uint64_t seq, Work& work, const std::function<void(const coll::Ctx&)>& run);
  void check_root(const char* op, int root) const;
  void check_peer(const char* op, int peer) const;

  const std::string backend_;
  const CommFactory factory_;
  std::unique_ptr<transport::Comm> comm_;
  OpQueue ops_;  // after comm_: stopped (drained) in the destructor, before comm_ goes
};

}  // namespace tdist::backends
