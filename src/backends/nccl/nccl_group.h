// NcclProcessGroup: the `nccl` backend, a ProcessGroup on CUDA device buffers over an NCCL
// communicator.
//
// Buffers: every pointer given to this group is CUDA device memory of the group's device
// (device(); nccl_backend.h says how it is chosen) or managed memory; anything else (host
// memory, another device's) is InvalidArgument before the call is numbered
// (cudaPointerGetAttributes). Sub-groups use the same device.
//
// Setup: rank 0 makes the ncclUniqueId and puts it under the key `nccl/unique_id` of the
// group's store (its own namespace), the others read it from there; the communicator is
// made by ncclCommInitRankConfig in NCCL's non-blocking mode and polled until ready, so
// creation too ends with TimeoutError after timeout() (a rank that never came).
//
// Execution: each call is enqueued at once on the calling thread (collectives in their
// sequence order, under the base class's issue lock; every NCCL call on the communicator
// under launch_mu_, as NCCL's communicators are not thread-safe) on the group's one
// non-blocking CUDA stream, followed by a CUDA event of its Work. The host does not wait
// for the GPU: the call returns once NCCL has the operation (in non-blocking mode NCCL may
// still be connecting; the call waits for that, up to timeout()). The Work completes when
// its event has (Work::wait() polls cudaEventQuery with short sleeps, so its deadline, a
// timeout or an abort can end the wait; is_completed() looks once). The flight record's
// start is the enqueue, its finish the event. gather, scatter, all_gatherv, all_to_all,
// all_to_allv and point-to-point calls are ncclSend/ncclRecv pairs inside one
// ncclGroupStart/ncclGroupEnd; a rank's own block is a device-to-device copy on the stream.
// barrier is an all_reduce of one f32 in a scratch buffer of the device. Point-to-point
// messages of a pair are matched in issue order (NCCL has no tags: a tag is accepted but
// not matched, as in PyTorch's NCCL backend), and are ordered with the collectives on the
// stream.
//
// Ordering with the caller's work (tdist/device.h): each operation starts after the work
// queued before the call on the caller's stream, CallerStream::current() (the LibTorch
// layer's: torch's current stream), or on the legacy default stream when the calling
// thread has none (cudaMemcpy, cudaMemset, kernels on stream 0): an event recorded there,
// which the group's stream waits for. Work on other streams needs the caller's own
// synchronization before the call. The Work is a DeviceWork: cuda_event() is its event, for
// a caller's stream to wait on (torch's wait()); Work::wait() and synchronize() block the
// host until the event completed.
//
// Failure: one watchdog thread per group polls the pending events, ncclCommGetAsyncError
// and the oldest pending operation's deadline (issue time + timeout()). On an NCCL error
// (PeerError) or a passed deadline (TimeoutError) it aborts the communicator
// (ncclCommAbort), which ends the kernels still waiting on peers, and every pending and
// later operation of the group fails with that error, in the style of the other backends
// ("rank 1/2 (nccl) all_reduce #7: ..."). abort() does the same with PeerError. A dead peer
// is seen where NCCL's transport reports it (network transports) or at the deadline. The
// first failure on a rank is announced to the others through the group's store
// (failure_notice.h): a rank with operations pending sees it within a second and fails
// with PeerError quoting it, so an abort() or a timeout on one rank ends the group on all.
// A SIGKILLed rank announces nothing: its peers fail at NCCL's report or their deadline.
//
// Thread-safety: as ProcessGroup. Destruction waits for the pending operations (each ends
// by its deadline at the latest), stops the watchdog and frees the communicator (or has
// aborted it), the stream and the scratch buffer. A call (or a wait on its Work) makes
// the group's device the calling thread's current CUDA device (as torch.cuda.set_device
// would) and leaves it so.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/nccl/failure_notice.h"
#include "tdist/device.h"
#include "tdist/process_group.h"
#include "tdist/thread_annotations.h"

namespace tdist::backends::nccl {

class NcclProcessGroup;

// The Work of one operation: completes through its CUDA event on the group's stream.
class NcclWork final : public Work, public DeviceWork {
 public:
  NcclWork(const char* op, std::optional<uint64_t> seq, Deadline deadline,
           std::weak_ptr<NcclProcessGroup> group)
      : Work(op), seq_(seq), deadline_(deadline), group_(std::move(group)) {}
  ~NcclWork() override;

  void* cuda_event() const override { return event_; }

 protected:
  void poll(Deadline deadline) override;

 private:
  friend class NcclProcessGroup;
  const std::optional<uint64_t> seq_;  // collectives only
  const Deadline deadline_;            // issue time + the group's timeout
  std::weak_ptr<NcclProcessGroup> group_;
  cudaEvent_t event_ = nullptr;       // recorded after the operation; set once at launch
  std::atomic<bool> settled_{false};  // claimed by the one settle()
};

// What an operation's enqueue function gets while it holds the communicator: the
// communicator and stream, and the calls every operation needs.
class Enqueuer {
 public:
  Enqueuer(ncclComm_t comm, cudaStream_t stream, int rank, std::chrono::milliseconds timeout,
           const std::atomic<bool>& abort_requested)
      : comm_(comm), stream_(stream), rank_(rank), timeout_(timeout), abort_(abort_requested) {}

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

  // Checks an NCCL call's result and, in non-blocking mode, waits until NCCL has the call
  // (ncclCommGetAsyncError no longer ncclInProgress): TimeoutError after the group's
  // timeout, PeerError when the group is aborted meanwhile.
  void await(ncclResult_t rc, const char* what) const;

  // One point-to-point transfer of `count` elements with `peer`.
  struct Transfer {
    int peer;
    void* data;
    size_t count;
  };
  // The ncclSend/ncclRecv of `sends` and `recvs` in one NCCL group, after a copy of
  // `self_bytes` from `self_src` to `self_dst` on the stream (none when 0 or the same).
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, DType dtype,
                const void* self_src = nullptr, void* self_dst = nullptr,
                size_t self_bytes = 0) const;

  // A stream-ordered device copy of `bytes` at `src` (cudaMallocAsync); the caller frees it
  // on the stream (cudaFreeAsync) once the operation reading it was enqueued.
  void* copy_of(const void* src, size_t bytes) const;

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_;
  std::chrono::milliseconds timeout_;
  const std::atomic<bool>& abort_;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  // Makes the communicator of `size` ranks on CUDA device `device` through `store`
  // (blocking, collective over the group; TimeoutError after `timeout`), its stream and
  // scratch buffer, and starts the watchdog. Throws Error/PeerError from CUDA and NCCL.
  NcclProcessGroup(int device, std::shared_ptr<Store> store, int rank, int size,
                   std::chrono::milliseconds timeout, std::vector<int> global_ranks = {});
  ~NcclProcessGroup() override;

  std::string backend_name() const override { return "nccl"; }
  unsigned memory_kinds() const override { return memory_bit(MemoryKind::kCuda); }
  void abort() override;

  int device() const { return device_; }
  // The stream every operation of this group runs on (the torch layer will wait on it).
  cudaStream_t stream() const { return stream_; }

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

 private:
  friend class NcclWork;
  using Enqueue = std::function<void(Enqueuer& e)>;

  // Enqueues `enqueue` (with launch_mu_ held and the group's device current) and the
  // Work's event; a failure fails the group and the Work.
  WorkPtr launch(const char* op, std::optional<uint64_t> seq, const Enqueue& enqueue)
      TDIST_EXCLUDES(launch_mu_, mu_);

  // InvalidArgument "<op>: <name> is host memory ..., but the nccl backend takes device
  // memory of CUDA device N" unless `p` (with a non-zero count) is device memory of the
  // group's device or managed memory; before anything is numbered or launched.
  void check_buffer(const char* op, const char* name, const void* p, size_t count) const;

  // Settles `work` when its event completed (success) or the group failed (its error);
  // returns whether it is settled.
  bool try_settle(NcclWork& work) TDIST_EXCLUDES(mu_);
  void settle(NcclWork& work, std::exception_ptr error);
  // The group's first failure: records it, aborts the communicator, wakes the watchdog and,
  // unless it came from a peer's notice, tells the peers (notice_).
  void fail(std::exception_ptr error, bool announce = true) TDIST_EXCLUDES(launch_mu_, mu_);
  std::exception_ptr failure() const TDIST_EXCLUDES(mu_);
  std::string where(const std::string& op, std::optional<uint64_t> seq) const;

  void watchdog() TDIST_EXCLUDES(mu_);
  // Polls ncclCommGetAsyncError when no call holds the communicator; fails the group on
  // an error.
  void check_async_error() TDIST_EXCLUDES(launch_mu_, mu_);

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_done_ = nullptr;  // recorded on the caller's stream at each launch
  void* scratch_ = nullptr;            // barrier's one f32 on the device

  mutable Mutex launch_mu_;  // every NCCL call on comm_, enqueues on stream_
  ncclComm_t comm_ TDIST_GUARDED_BY(launch_mu_) = nullptr;  // null once aborted
  std::atomic<bool> abort_requested_{false};                // ends await()'s polling

  mutable Mutex mu_;
  CondVar cv_;  // new pending work, a settled one, stopping
  std::deque<std::shared_ptr<NcclWork>> pending_ TDIST_GUARDED_BY(mu_);  // launch order
  std::exception_ptr failed_ TDIST_GUARDED_BY(mu_);
  bool stopping_ TDIST_GUARDED_BY(mu_) = false;
  // Made before the watchdog starts, destroyed after it stopped.
  std::unique_ptr<FailureNotice> notice_;
  std::thread watchdog_;
};

}  // namespace tdist::backends::nccl
