// PeerMappings (mappings.h).
#include "transport/cuda_ipc/mappings.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>

#include "transport/cuda_ipc/device_stream.h"

namespace tdist::transport::cuda_ipc {
namespace {

// Views open in this process, by handle bytes: the mapping and how many channels use it.
struct OpenView {
  void* mapped = nullptr;
  int users = 0;
};

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, OpenView>& registry() {
  static auto* views = new std::unordered_map<std::string, OpenView>();  // outlives exit
  return *views;
}

void* open_view(const std::string& handle) {
  std::lock_guard<std::mutex> lock(registry_mu());
  OpenView& v = registry()[handle];
  if (v.users == 0) {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    void* mapped = nullptr;
    const cudaError_t rc = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (rc != cudaSuccess) {
      registry().erase(handle);
      check_cuda(rc, "cudaIpcOpenMemHandle of a peer's allocation");
    }
    v.mapped = mapped;
  }
  ++v.users;
  return v.mapped;
}

void close_view(const std::string& handle) {
  std::lock_guard<std::mutex> lock(registry_mu());
  auto it = registry().find(handle);
  if (it == registry().end() || --it->second.users > 0) return;
  (void)cudaIpcCloseMemHandle(it->second.mapped);
  registry().erase(it);
}

static_assert(sizeof(cudaIpcMemHandle_t) == kHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kHandleBytes);

}  // namespace

PeerMappings::~PeerMappings() {
  while (!views_.empty()) close(views_.begin());
  for (auto& [handle, event] : events_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void PeerMappings::close(std::map<uint64_t, View>::iterator it) {
  close_view(it->second.handle);
  views_.erase(it);
}

uint8_t* PeerMappings::payload(const IpcDescriptor& d) {
  const std::string handle(reinterpret_cast<const char*>(d.memory), kHandleBytes);
  auto it = views_.find(d.base);
  if (it == views_.end() || it->second.handle != handle || it->second.bytes != d.allocation) {
    // Whatever overlaps [base, base + allocation) was freed by the sender: close it.
    auto first = views_.lower_bound(d.base);
    if (first != views_.begin()) {
      auto before = std::prev(first);
      if (before->first + before->second.bytes > d.base) first = before;
    }
    while (first != views_.end() && first->first < d.base + d.allocation) {
      auto next = std::next(first);
      close(first);
      first = next;
    }
    View view{handle, d.allocation, open_view(handle)};
    it = views_.emplace(d.base, std::move(view)).first;
  }
  return static_cast<uint8_t*>(it->second.mapped) + d.offset;
}

void* PeerMappings::event(const IpcDescriptor& d) {
  const std::string handle(reinterpret_cast<const char*>(d.event), kHandleBytes);
  auto it = events_.find(handle);
  if (it != events_.end()) return it->second;
  cudaIpcEventHandle_t h;
  std::memcpy(&h, d.event, sizeof(h));
  cudaEvent_t event = nullptr;
  check_cuda(cudaIpcOpenEventHandle(&event, h), "cudaIpcOpenEventHandle of a peer's event");
  events_.emplace(handle, event);
  return event;
}

}  // namespace tdist::transport::cuda_ipc
