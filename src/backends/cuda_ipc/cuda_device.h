// CudaDevice: the cuda_ipc backend's CommDevice (comm_device.h) and DeviceOps
// (collectives/device_ops.h) on one device and stream (transport/cuda_ipc/device_stream.h).
//
// Kernels: kernels.h, enqueued on the group's stream. Copies: cudaMemcpyAsync there.
// Scratch: cudaMalloc'd (scratch is sent to peers, and cuda_ipc shares cudaMalloc memory),
// kept for reuse: a released buffer returns to a free list by size and is handed out again
// to a request it fits; all are freed at destruction (after the stream is idle). Ordering
// with the caller: an event recorded on the caller's stream (CallerStream, or the legacy
// default stream) that the group's stream waits for. complete(): an event recorded on the
// group's stream, synchronised on the host.
// Failure: Error naming the CUDA call. Thread-safety: order_after_caller from any thread
// (the event it records under a leaf mutex); the rest from the threads that run the
// operations of the group and its subgroups (which share it; scratch under a leaf mutex).
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "backends/comm/comm_device.h"
#include "tdist/thread_annotations.h"
#include "transport/cuda_ipc/device_stream.h"

namespace tdist::backends::cuda_ipc {

class CudaDevice final : public CommDevice, public coll::DeviceOps {
 public:
  explicit CudaDevice(std::shared_ptr<const transport::cuda_ipc::DeviceStream> stream);
  ~CudaDevice() override;

  const std::shared_ptr<const transport::cuda_ipc::DeviceStream>& stream() const { return stream_; }

  // CommDevice
  MemoryKind memory() const override { return MemoryKind::kCuda; }
  coll::DeviceOps* ops() override { return this; }
  void order_after_caller() override;
  std::shared_ptr<void> complete() override;

  // DeviceOps
  void* allocate(size_t bytes) override;
  void release(void* data, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              ReduceOp op) override;
  void premultiply(void* data, size_t count, DType dtype, ReduceOp op) override;
  void finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size) override;

 private:
  void* cuda_stream() const { return stream_->stream(); }

  const std::shared_ptr<const transport::cuda_ipc::DeviceStream> stream_;
  Mutex caller_mu_;                                  // leaf
  void* caller_event_ TDIST_GUARDED_BY(caller_mu_);  // cudaEvent_t
  Mutex scratch_mu_;  // leaf: a group and its subgroups share this device
  std::multimap<size_t, void*> free_scratch_ TDIST_GUARDED_BY(scratch_mu_);  // by capacity
  std::map<void*, size_t> scratch_capacity_ TDIST_GUARDED_BY(scratch_mu_);   // all of them
};

}  // namespace tdist::backends::cuda_ipc
