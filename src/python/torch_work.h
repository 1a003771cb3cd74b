// TorchWork: the c10d::Work that torch.distributed sees for one tdist operation (or a
// coalesced few), and the translation of tdist's errors into torch's. Internal to the
// Python extension.
//
// wait() runs or waits for the tdist operations (a caller that waits runs its own queued
// collective, as in the C++ API) and rethrows their error as torch does: PeerError,
// TimeoutError and DesyncError as torch.distributed.DistBackendError, InvalidArgument as
// ValueError, anything else as RuntimeError, each message starting "tdist: ".
// A call with a timeout of its own (its options' or the backend's setTimeout) gives the
// Work a deadline from its issue: a wait past it raises the timeout error, and leaves the
// operation to the group, whose own timeout ends it. getFuture() returns a future completed
// with result() (the output tensors) when every operation finished, on the thread that
// finished the last one; point-to-point operations, which some transports move only while
// somebody waits, are handed to the backend's progress thread for it (progress_thread.h).
// While torch's profiler runs, each call is an async event named as gloo names its own
// ("tdist:all_reduce"), with the inputs' shapes, ending when the operation does.
// With timing on (enableCollectivesTiming), getDuration() is the milliseconds from the
// issue to the finish of the last operation.
// Thread-safety: as c10d::Work's; any thread may wait or take the future.
#pragma once

#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "python/progress_thread.h"
#include "tdist/deadline.h"
#include "tdist/thread_annotations.h"
#include "tdist/work.h"

namespace tdist::python {

// Whether a RecordFunction callback (torch's profiler) would see a user-scope event now.
bool profiler_on();
// The torch exception for a tdist error (or for any other exception, unchanged).
std::exception_ptr to_torch_error(std::exception_ptr error);
// Runs `fn`, rethrowing what it throws as to_torch_error does.
template <typename F>
auto torch_errors(F&& fn) {
  try {
    return fn();
  } catch (...) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
}

class TorchWork final : public ::c10d::Work {
 public:
  // `progress`: the backend's progress thread, for the point-to-point Works' futures;
  // `deadline`: the call's own (Deadline::never() when the group's timeout applies);
  // `timed`: whether to measure getDuration(); `inputs`: the call's input tensors, for
  // the profiler's event ("tdist:all_reduce" with their shapes; null: the outputs').
  TorchWork(int rank, ::c10d::OpType type, std::vector<WorkPtr> works,
            std::vector<at::Tensor> outputs, std::shared_ptr<ProgressThread> progress,
            Deadline deadline = Deadline::never(), bool timed = false,
            const std::vector<at::Tensor>* inputs = nullptr);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override TDIST_EXCLUDES(mu_);
  // The rank a receive from any source got its message from (after wait()).
  int sourceRank() const override;
#if TORCH_VERSION_MAJOR >= 2
  float getDuration() const override;
#endif

 private:
  const std::vector<WorkPtr> works_;
  const std::vector<at::Tensor> outputs_;
  const bool p2p_;
  const std::shared_ptr<ProgressThread> progress_;
  const Deadline deadline_;
  // Timing: the issue, and the finish of the last operation (0 until then), in steady ns.
  const int64_t issued_ns_;
  std::shared_ptr<std::atomic<int64_t>> finished_ns_;  // null unless timed
  Mutex mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_ TDIST_GUARDED_BY(mu_);  // made on first use
};

}  // namespace tdist::python
