// CudaDevice (cuda_device.h).
#include "backends/cuda_ipc/cuda_device.h"

#include <cuda_runtime_api.h>

#include "backends/cuda_ipc/kernels.h"
#include "tdist/error.h"

namespace tdist::backends::cuda_ipc {
namespace {

using transport::cuda_ipc::check_cuda;

void check_kernel(int rc, const char* what, DType dtype, ReduceOp op) {
  if (rc == 0) return;
  const auto e = static_cast<cudaError_t>(rc);
  TDIST_THROW(Error, "cuda_ipc: ", what, " kernel for ", dtype_name(dtype), " ",
              reduce_op_name(op.kind), ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

cudaEvent_t new_event() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync),
             "cudaEventCreateWithFlags");
  return e;
}

}  // namespace

CudaDevice::CudaDevice(std::shared_ptr<const transport::cuda_ipc::DeviceStream> stream)
    : stream_(std::move(stream)) {
  stream_->use();
  MutexLock lock(caller_mu_);
  caller_event_ = new_event();
}

CudaDevice::~CudaDevice() {
  (void)cudaSetDevice(stream_->device());
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(cuda_stream()));
  {
    MutexLock lock(scratch_mu_);
    for (auto& [data, bytes] : scratch_capacity_) (void)cudaFree(data);
  }
  MutexLock lock(caller_mu_);
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(caller_event_));
}

void CudaDevice::order_after_caller() {
  stream_->use();
  auto caller = static_cast<cudaStream_t>(CallerStream::current());
  MutexLock lock(caller_mu_);
  auto event = static_cast<cudaEvent_t>(caller_event_);
  check_cuda(cudaEventRecord(event, caller), "cudaEventRecord on the caller's stream");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream()), event, 0),
             "cudaStreamWaitEvent for the caller's stream");
}

std::shared_ptr<void> CudaDevice::complete() {
  stream_->use();
  cudaEvent_t event = new_event();
  std::shared_ptr<void> owner(event,
                              [](void* e) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  check_cuda(cudaEventRecord(event, static_cast<cudaStream_t>(cuda_stream())),
             "cudaEventRecord after an operation");
  check_cuda(cudaEventSynchronize(event), "cudaEventSynchronize after an operation");
  return owner;
}

void* CudaDevice::allocate(size_t bytes) {
  MutexLock lock(scratch_mu_);
  auto it = free_scratch_.lower_bound(bytes);
  if (it != free_scratch_.end()) {
    void* data = it->second;
    free_scratch_.erase(it);
    return data;
  }
  stream_->use();
  void* data = nullptr;
  check_cuda(cudaMalloc(&data, bytes), "cudaMalloc of collective scratch");
  scratch_capacity_.emplace(data, bytes);
  return data;
}

void CudaDevice::release(void* data, size_t /*bytes*/) {
  // Stream-ordered reuse: work that uses it next is queued after the work that used it.
  MutexLock lock(scratch_mu_);
  free_scratch_.emplace(scratch_capacity_.at(data), data);
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  stream_->use();
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                             static_cast<cudaStream_t>(cuda_stream())),
             "cudaMemcpyAsync on the group's stream");
}

void CudaDevice::reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
                        ReduceOp op) {
  validate(op, dtype);
  stream_->use();
  check_kernel(kernels::reduce(dst, a, b, count, static_cast<int>(dtype), static_cast<int>(op.kind),
                               cuda_stream()),
               "reduce", dtype, op);
}

void CudaDevice::premultiply(void* data, size_t count, DType dtype, ReduceOp op) {
  if (op.kind != ReduceOpKind::kPremulSum) return;
  stream_->use();
  check_kernel(kernels::scale(data, count, static_cast<int>(dtype), op.scale, cuda_stream()),
               "premultiply", dtype, op);
}

void CudaDevice::finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size) {
  if (op.kind != ReduceOpKind::kAvg) return;
  stream_->use();
  check_kernel(kernels::divide(data, count, static_cast<int>(dtype), world_size, cuda_stream()),
               "avg", dtype, op);
}

}  // namespace tdist::backends::cuda_ipc
