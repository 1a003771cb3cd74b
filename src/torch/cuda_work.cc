// CUDA tensors in the tensor collectives (cuda_work.h): the side stream, the staging
// through pinned host memory, and the Work with torch's stream semantics.
#include "cuda_work.h"

#if TDIST_TORCH_CUDA

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::torch {

// The CUDA side of one call: the caller's stream and the side stream.
struct CudaCall {
  CudaCall(c10::cuda::CUDAStream caller_stream, c10::cuda::CUDAStream side_stream)
      : caller(caller_stream), side(side_stream) {}
  c10::cuda::CUDAStream caller;  // torch's current stream when the call was made
  c10::cuda::CUDAStream side;    // the copies' stream
  // kStaged: torch's current stream is `side` on the calling thread while the inputs are
  // staged (until launch_cuda issues the call).
  std::optional<c10::cuda::CUDAStreamGuard> on_side;
};

namespace {

using ::torch::Tensor;

// One operation on CUDA tensors: the group's Work, the buffers, and the copy-back.
class CudaOp {
 public:
  CudaOp(WorkPtr inner, Staging staging) : inner_(std::move(inner)), staging_(std::move(staging)) {}

  const WorkPtr& inner() const { return inner_; }
  StageMode mode() const { return staging_.mode; }
  c10::DeviceIndex device() const { return staging_.device.index(); }

  // Queues the copy-back on the side stream (kDevice: after the operation's event; kStaged:
  // once the host collective completed) and records done_ after it; once. Nothing is
  // copied after a failure the host knows of. Never throws: a CUDA error becomes error().
  void queue_copy_back() TDIST_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (queued_) return;
    queued_ = true;
    if (inner_->is_completed() && inner_->exception() != nullptr) return;
    try {
      CudaCall& call = *staging_.cuda;
      const c10::cuda::CUDAStreamGuard guard(call.side);
      if (staging_.mode == StageMode::kDevice) {
        at::cuda::CUDAEvent queued;  // the inputs' dense copies, made on the caller's stream
        queued.record(call.caller);
        queued.block(call.side);
        const auto* device_work = dynamic_cast<const DeviceWork*>(inner_.get());
        if (device_work != nullptr && device_work->cuda_event() != nullptr) {
          TDIST_CHECK(cudaStreamWaitEvent(call.side.stream(),
                                          static_cast<cudaEvent_t>(device_work->cuda_event()),
                                          0) == cudaSuccess,
                      Error, "cudaStreamWaitEvent on the operation's event failed");
        }
      }
      for (auto& [dst, src] : staging_.copy_back) {
        c10::InferenceMode inference(dst.is_inference());  // as TensorWork's copy-back
        ::torch::NoGradGuard no_grad;
        dst.copy_(src, /*non_blocking=*/true);
      }
      done_.record(call.side);
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  // The host's view: whether the operation, and the copy-back after it, are done.
  bool device_done() {
    if (!inner_->is_completed()) return false;
    queue_copy_back();
    return done_.query();
  }

  // The error of the operation or of the copy-back (null while unknown).
  std::exception_ptr error() TDIST_EXCLUDES(mu_) {
    if (inner_->is_completed() && inner_->exception() != nullptr) return inner_->exception();
    MutexLock lock(mu_);
    return error_;
  }

  // Makes `stream` wait for the copy-back (a no-op before it was queued: kStaged's wait()
  // queues it first).
  void block(const c10::cuda::CUDAStream& stream) { done_.block(stream); }
  void synchronize_done() { done_.synchronize(); }

 private:
  const WorkPtr inner_;
  // Kept until the CudaOp goes: the operation may use every buffer. Not written after the
  // constructor.
  Staging staging_;
  Mutex mu_;
  bool queued_ TDIST_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ TDIST_GUARDED_BY(mu_);
  // Recorded once, by queue_copy_back() under mu_; read without it, but only after a
  // queue_copy_back() returned (the reader's own, or launch_cuda's for kDevice), which
  // orders the read after the record.
  at::cuda::CUDAEvent done_;
};

class CudaTensorWork final : public Work {
 public:
  CudaTensorWork(const char* op, std::shared_ptr<CudaOp> state)
      : Work(op), state_(std::move(state)) {}

  ~CudaTensorWork() override {
    try {
      if (!is_completed()) {
        adopt_orphan([state = state_] { return state->device_done(); }, {});
      }
    } catch (...) {
      // A CUDA error while looking: the buffers stay with the orphans regardless.
      adopt_orphan([state = state_] { return state->inner()->is_completed(); }, {});
    }
  }

  using Work::wait;
  // torch's wait(): the caller's current stream waits; the host waits only for a host
  // collective (kStaged), as gloo's does.
  void wait(Deadline deadline) override {
    if (state_->mode() == StageMode::kStaged) {
      state_->inner()->synchronize(deadline);
      state_->queue_copy_back();
    }
    if (std::exception_ptr error = state_->error()) std::rethrow_exception(error);
    state_->block(c10::cuda::getCurrentCUDAStream(state_->device()));
  }

 protected:
  void poll(Deadline deadline) override {
    const WorkPtr& inner = state_->inner();
    if (!inner->is_completed() && !(!deadline.is_never() && deadline.time() <= Clock::now())) {
      try {
        inner->synchronize(deadline);
      } catch (...) {
        // Read from exception() once complete; a passed deadline leaves it running.
      }
    }
    if (!inner->is_completed()) return;
    state_->queue_copy_back();
    if (std::exception_ptr error = state_->error()) {
      finish(error);
      return;
    }
    if (deadline.is_never()) {
      state_->synchronize_done();
    } else {
      auto step = std::chrono::microseconds(20);
      while (!state_->device_done() && deadline.time() > Clock::now()) {
        std::this_thread::sleep_for(step);
        step = std::min(step * 2, std::chrono::microseconds(1000));
      }
    }
    if (!state_->device_done()) return;
    finish(state_->error());
  }

 private:
  const std::shared_ptr<CudaOp> state_;
};

}  // namespace

void open_cuda(Staging& s, const ProcessGroup& group) {
  const bool device_memory = (group.memory_kinds() & memory_bit(MemoryKind::kCuda)) != 0;
  s.mode = device_memory ? StageMode::kDevice : StageMode::kStaged;
  const c10::DeviceIndex index = s.device.index();
  s.cuda =
      std::make_shared<CudaCall>(c10::cuda::getCurrentCUDAStream(index),
                                 c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
  if (s.mode == StageMode::kStaged) {
    // The inputs' copies start after what the caller queued (the inputs themselves).
    at::cuda::CUDAEvent queued;
    queued.record(s.cuda->caller);
    queued.block(s.cuda->side);
    s.cuda->on_side.emplace(s.cuda->side);
  }
}

WorkPtr launch_cuda(const char* op, Staging staging, const std::function<WorkPtr()>& issue) {
  CudaCall& call = *staging.cuda;
  WorkPtr inner;
  if (staging.mode == StageMode::kStaged) {
    at::cuda::CUDAEvent staged;
    staged.record(call.side);
    call.on_side.reset();  // torch's current stream is the caller's again
    staged.synchronize();  // the host collective reads the pinned buffers
    inner = issue();
  } else {
    const CallerStream caller(call.caller.stream());
    inner = issue();
  }
  auto state = std::make_shared<CudaOp>(inner, std::move(staging));
  if (state->mode() == StageMode::kDevice) {
    state->queue_copy_back();
  } else {
    inner->add_callback([weak = std::weak_ptr<CudaOp>(state)] {
      if (auto self = weak.lock()) self->queue_copy_back();
    });
  }
  return std::make_shared<CudaTensorWork>(op, std::move(state));
}

}  // namespace tdist::torch

#endif  // TDIST_TORCH_CUDA
