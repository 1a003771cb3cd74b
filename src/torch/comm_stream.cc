// CommStream (comm_stream.h): DDP's side stream, events between it and the current stream.
#include "comm_stream.h"

#if TDIST_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tdist::torch {

#if TDIST_TORCH_CUDA
struct CommStream::Impl {
  explicit Impl(c10::DeviceIndex device)
      : index(device), side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}
  c10::DeviceIndex index;
  c10::cuda::CUDAStream side;
};

CommStream::CommStream(c10::Device device) {
  if (device.is_cuda()) impl_ = std::make_unique<Impl>(device.index());
}

WorkPtr CommStream::run(const std::function<WorkPtr()>& issue) {
  if (impl_ == nullptr) return issue();
  at::cuda::CUDAEvent ready;  // the gradients queued so far
  ready.record(c10::cuda::getCurrentCUDAStream(impl_->index));
  ready.block(impl_->side);
  const c10::cuda::CUDAStreamGuard guard(impl_->side);
  return issue();
}

void CommStream::join() {
  if (impl_ == nullptr) return;
  at::cuda::CUDAEvent done;
  done.record(impl_->side);
  done.block(c10::cuda::getCurrentCUDAStream(impl_->index));
}
#else
struct CommStream::Impl {};

CommStream::CommStream(c10::Device /*device*/) {}

WorkPtr CommStream::run(const std::function<WorkPtr()>& issue) { return issue(); }

void CommStream::join() {}
#endif

CommStream::~CommStream() = default;

}  // namespace tdist::torch
