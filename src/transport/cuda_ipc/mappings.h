// PeerMappings: one cuda_ipc channel's opened views of its peer's device allocations
// (cudaIpcOpenMemHandle), and its opened copies of the peer's IPC events.
//
// Opening a handle is slow (a driver call that maps memory), so each opened allocation is
// kept until teardown, keyed by the sender's base address and the handle's bytes. When a
// descriptor names a base address that is cached with other handle bytes, or an allocation
// that overlaps a cached one, the sender freed the old allocation and a new one reused the
// address: the old view is closed first and the new handle opened. Views are counted
// process-wide (two groups over the same pair of processes open one handle once: CUDA
// refuses a second open of a handle in one process). Events (fixed slots of the sender)
// are opened once each and destroyed at teardown.
// Failure: Error naming the CUDA call. Thread-safety: one thread at a time (the core's
// receive lock of the channel); the process-wide count has its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "transport/cuda_ipc/descriptor.h"

namespace tdist::transport::cuda_ipc {

class PeerMappings {
 public:
  PeerMappings() = default;
  ~PeerMappings();  // closes every view and event (the device must be current)
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  // The payload's address in this process (the allocation opened or cached, plus offset).
  uint8_t* payload(const IpcDescriptor& d);
  // The opened event of `d` (a cudaEvent_t).
  void* event(const IpcDescriptor& d);

  size_t open_allocations() const { return views_.size(); }

 private:
  struct View {
    std::string handle;  // the cudaIpcMemHandle_t's bytes
    uint64_t bytes = 0;
    void* mapped = nullptr;
  };
  void close(std::map<uint64_t, View>::iterator it);

  std::map<uint64_t, View> views_;                 // by the sender's base address
  std::unordered_map<std::string, void*> events_;  // by the cudaIpcEventHandle_t's bytes
};

}  // namespace tdist::transport::cuda_ipc
