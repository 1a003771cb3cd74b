// CudaIpcChannel: the cuda_ipc transport's channel (core/channel.h) — a shared-memory
// channel to a peer of this host for the host frames, plus device payloads by descriptor.
//
// Host bytes (headers, control frames, host payloads) go through the shared-memory channel
// it is (shm/channel.h: rings and a unix socket), unchanged. A device send (export_device)
// checks that the buffer is device memory of this group's device, finds its allocation
// (cuMemGetAddressRange), takes its IPC handle (cudaIpcGetMemHandle: memory from cudaMalloc, as
// PyTorch's caching allocator has it; stream-ordered pools and VMM allocations are refused with
// Error) and records an interprocess event of a slot on the group's stream; descriptor.h carries
// both. The receiver (import_device) opens the allocation (cached: mappings.h), makes the
// group's stream wait on the event, copies device to device on it and waits for the copy
// on the host, so the receive is complete, and the sender may reuse its buffer, once the
// core's answer goes back; then release_device returns the event slot.
// Ownership: owns the event slots and the peer's opened handles
// (closed at destruction); shares the DeviceStream with its group. Payloads that arrive
// before their receive are imported into buffers of the channel's own (cudaMalloc'd, kept
// for reuse until destruction), then copied to the receive (copy_device).
// Failure: a CUDA error on the sender throws Error from isend_device (nothing was sent);
// on the receiver it is the lost reason that aborts the Comm. A dead peer is seen by the
// shared-memory channel as for shm. Thread-safety: channel.h; the send side's slots take a leaf
// mutex.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tdist/thread_annotations.h"
#include "transport/core/channel.h"
#include "transport/cuda_ipc/device_stream.h"
#include "transport/cuda_ipc/mappings.h"
#include "transport/shm/channel.h"

namespace tdist::transport::cuda_ipc {

class CudaIpcChannel final : public shm::ShmChannel, public core::DeviceChannel {
 public:
  CudaIpcChannel(shm::PeerLink link, size_t single_copy_bytes,
                 std::shared_ptr<const DeviceStream> device);
  ~CudaIpcChannel() override;

  const char* kind() const override { return "cuda_ipc"; }
  std::string describe() const override;

  core::DeviceChannel* device() override { return this; }
  void export_device(const void* data, size_t bytes, core::DeviceDescriptor* out) override;
  std::string import_device(void* dest, size_t bytes,
                            const core::DeviceDescriptor& descriptor) override;
  void release_device(const core::DeviceDescriptor& descriptor) override;
  void* allocate_device(size_t bytes) override;
  void free_device(void* data, size_t bytes) override;
  std::string copy_device(void* dest, const void* src, size_t bytes) override;

 private:
  struct Slot {
    void* event = nullptr;  // cudaEvent_t (interprocess, no timing)
    uint8_t handle[kHandleBytes] = {};
  };
  uint32_t take_slot() TDIST_REQUIRES(slot_mu_);

  const std::shared_ptr<const DeviceStream> device_;

  Mutex slot_mu_;  // leaf
  std::vector<Slot> slots_ TDIST_GUARDED_BY(slot_mu_);
  std::vector<uint32_t> free_slots_ TDIST_GUARDED_BY(slot_mu_);

  // Receive side (the core's receive lock): the peer's allocations and events, and the
  // event the host waits on for a copy.
  PeerMappings mappings_;
  void* copied_ = nullptr;  // cudaEvent_t
  // Device buffers for payloads that arrived before their receive: spare ones by capacity,
  // and every one (freed at destruction).
  std::multimap<size_t, void*> spare_;
  std::map<void*, size_t> buffers_;
};

// The allocation holding device pointer `p`: its base address and size (the driver's
// cuMemGetAddressRange, reached through the runtime). Throws Error when `p` is none.
void allocation_of(const void* p, uint64_t* base, uint64_t* bytes);

}  // namespace tdist::transport::cuda_ipc
