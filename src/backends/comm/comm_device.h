// CommDevice: what a CommProcessGroup on device memory adds (the cuda_ipc backend's):
// where its buffers are, the device's kernels for the algorithms, and the ordering of its
// operations with the caller's CUDA work (tdist/device.h).
//
// A group given one runs every collective with Ctx{memory(), ops()} (collectives/
// context.h) and posts point-to-point operations as device messages. As an operation is
// queued, on the calling thread, order_after_caller() makes the group's stream wait for
// the work queued so far on the caller's stream (CallerStream). After a collective ran,
// on the worker, complete() records an event after its device work on the group's stream
// and waits for it on the host, so the Work completes with the device work; the event is
// the Work's DeviceWork::cuda_event(). Groups and their subgroups share one CommDevice
// (one stream). Failure: Error naming the CUDA call. Thread-safety: order_after_caller
// from any thread; ops() and complete() from the thread that runs the group's operations.
#pragma once

#include <cstddef>
#include <memory>

#include "collectives/device_ops.h"
#include "tdist/device.h"

namespace tdist::backends {

// The pipeline chunk of a device group's collectives unless TDIST_CHUNK_BYTES is set: each
// device message costs a host round trip (tens of microseconds: the IPC event, the copy
// waited for), while one GPU copies megabytes in microseconds, so chunks are large.
inline constexpr size_t kDeviceChunkBytes = size_t{32} << 20;

class CommDevice {
 public:
  virtual ~CommDevice() = default;
  virtual MemoryKind memory() const = 0;
  virtual coll::DeviceOps* ops() = 0;
  virtual void order_after_caller() = 0;
  // The event (a cudaEvent_t, owned by the returned pointer).
  virtual std::shared_ptr<void> complete() = 0;
};

}  // namespace tdist::backends
