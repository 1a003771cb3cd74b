// CudaIpcChannel (channel.h).
#include "transport/cuda_ipc/channel.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "tdist/error.h"

namespace tdist::transport::cuda_ipc {
namespace {

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

GetAddressRange address_range_function() {
  static const GetAddressRange fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    check_cuda(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000,
                                                cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
    TDIST_CHECK(found == cudaDriverEntryPointSuccess && p != nullptr, Error,
                "cuda_ipc: the CUDA driver has no cuMemGetAddressRange");
    return reinterpret_cast<GetAddressRange>(p);
  }();
  return fn;
}

}  // namespace

void allocation_of(const void* p, uint64_t* base, uint64_t* bytes) {
  CUdeviceptr b = 0;
  size_t n = 0;
  const CUresult rc = address_range_function()(&b, &n, reinterpret_cast<CUdeviceptr>(p));
  TDIST_CHECK(rc == CUDA_SUCCESS, Error, "cuda_ipc: cuMemGetAddressRange(", p,
              ") failed (CUresult ", static_cast<int>(rc), "): not a device allocation");
  *base = static_cast<uint64_t>(b);
  *bytes = n;
}

CudaIpcChannel::CudaIpcChannel(shm::PeerLink link, size_t single_copy_bytes,
                               std::shared_ptr<const DeviceStream> device)
    : ShmChannel(std::move(link), single_copy_bytes), device_(std::move(device)) {
  device_->use();
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
             "cudaEventCreateWithFlags");
  copied_ = e;
}

CudaIpcChannel::~CudaIpcChannel() {
  (void)cudaSetDevice(device_->device());
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(copied_));
  for (auto& [data, bytes] : buffers_) (void)cudaFree(data);
  MutexLock lock(slot_mu_);
  for (Slot& s : slots_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(s.event));
}

std::string CudaIpcChannel::describe() const {
  return detail::str_cat("cuda_ipc device ", device_->device(), " over ", ShmChannel::describe());
}

uint32_t CudaIpcChannel::take_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  Slot s;
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess),
             "cudaEventCreateWithFlags(interprocess)");
  s.event = e;
  cudaIpcEventHandle_t h;
  const cudaError_t rc = cudaIpcGetEventHandle(&h, e);
  if (rc != cudaSuccess) {
    (void)cudaEventDestroy(e);
    check_cuda(rc, "cudaIpcGetEventHandle");
  }
  std::memcpy(s.handle, &h, kHandleBytes);
  slots_.push_back(s);
  return static_cast<uint32_t>(slots_.size() - 1);
}

void CudaIpcChannel::export_device(const void* data, size_t bytes, core::DeviceDescriptor* out) {
  device_->use();
  cudaPointerAttributes attr{};
  check_cuda(cudaPointerGetAttributes(&attr, data), "cudaPointerGetAttributes");
  TDIST_CHECK(attr.type == cudaMemoryTypeDevice && attr.device == device_->device(),
              InvalidArgument, "cuda_ipc: the send buffer ", data,
              " is not device memory of device ", device_->device(), " (memory type ",
              static_cast<int>(attr.type), ", device ", attr.device, ")");
  IpcDescriptor d;
  allocation_of(data, &d.base, &d.allocation);
  d.offset = reinterpret_cast<uint64_t>(data) - d.base;
  d.bytes = bytes;
  d.device = device_->device();
  cudaIpcMemHandle_t mh;
  const cudaError_t rc = cudaIpcGetMemHandle(&mh, reinterpret_cast<void*>(d.base));
  TDIST_CHECK(rc == cudaSuccess, Error, "cuda_ipc: cudaIpcGetMemHandle of the allocation holding ",
              data, ": ", cudaGetErrorString(rc),
              " (cuda_ipc shares memory from cudaMalloc, e.g. PyTorch's caching allocator without "
              "expandable segments; not cudaMallocAsync pools or VMM allocations)");
  std::memcpy(d.memory, &mh, kHandleBytes);
  {
    MutexLock lock(slot_mu_);
    d.slot = take_slot();
    const Slot& s = slots_[d.slot];
    const cudaError_t recorded = cudaEventRecord(static_cast<cudaEvent_t>(s.event),
                                                 static_cast<cudaStream_t>(device_->stream()));
    if (recorded != cudaSuccess) {
      free_slots_.push_back(d.slot);
      check_cuda(recorded, "cudaEventRecord of a send's IPC event");
    }
    std::memcpy(d.event, s.handle, kHandleBytes);
  }
  encode(d, out);
}

std::string CudaIpcChannel::import_device(void* dest, size_t bytes,
                                          const core::DeviceDescriptor& descriptor) {
  IpcDescriptor d;
  std::string why = decode(descriptor, &d);
  if (!why.empty()) return why;
  if (d.bytes != bytes) {
    return detail::str_cat("protocol error: a device descriptor of ", d.bytes, " bytes for ",
                           bytes);
  }
  try {
    device_->use();
    auto stream = static_cast<cudaStream_t>(device_->stream());
    const uint8_t* src = mappings_.payload(d);
    check_cuda(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(mappings_.event(d)), 0),
               "cudaStreamWaitEvent on the sender's IPC event");
    check_cuda(cudaMemcpyAsync(dest, src, bytes, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync of a received payload");
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(copied_), stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_)),
               "cudaEventSynchronize after a received payload's copy");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void* CudaIpcChannel::allocate_device(size_t bytes) {
  auto it = spare_.lower_bound(bytes);
  if (it != spare_.end()) {
    void* data = it->second;
    spare_.erase(it);
    return data;
  }
  void* data = nullptr;
  if (cudaSetDevice(device_->device()) != cudaSuccess || cudaMalloc(&data, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error of a failed allocation
    return nullptr;
  }
  buffers_.emplace(data, bytes);
  return data;
}

void CudaIpcChannel::free_device(void* data, size_t /*bytes*/) {
  auto it = buffers_.find(data);
  if (it != buffers_.end()) spare_.emplace(it->second, data);
}

std::string CudaIpcChannel::copy_device(void* dest, const void* src, size_t bytes) {
  try {
    device_->use();
    auto stream = static_cast<cudaStream_t>(device_->stream());
    check_cuda(cudaMemcpyAsync(dest, src, bytes, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync of an early payload to its receive");
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(copied_), stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_)),
               "cudaEventSynchronize after an early payload's copy");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void CudaIpcChannel::release_device(const core::DeviceDescriptor& descriptor) {
  IpcDescriptor d;
  if (!decode(descriptor, &d).empty()) return;  // our own encoding: cannot happen
  MutexLock lock(slot_mu_);
  if (d.slot < slots_.size()) free_slots_.push_back(d.slot);
}

}  // namespace tdist::transport::cuda_ipc
