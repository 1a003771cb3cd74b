// CUDA tensors in the tensor collectives (internal to tdist_torch; built only against a
// LibTorch with CUDA, TDIST_TORCH_CUDA=1). tensor_work.h's open_staging() and launch()
// hand calls on CUDA tensors here.
//
// kDevice (a group whose memory_kinds() include kCuda, e.g. `nccl`): the group gets device
// pointers inside a CallerStream of torch's current stream, so the operation starts after
// the work queued there. A side stream waits for the operation's event
// (DeviceWork::cuda_event()) and makes the copy-back into the caller's tensors, then records
// the Work's done event.
//
// kStaged (a host-only group: tcp, shm, auto, mpi; gloo's way): a side stream waits for
// torch's current stream and copies the inputs into pinned host buffers (non_blocking);
// the calling thread waits for those copies only (not for anything queued later), then
// issues the host collective, which runs in the background as usual. Once it completed (the
// group's Work callback, or the first wait()), the results go back on the side stream
// (non_blocking), after which the done event is recorded.
//
// The Work (torch's semantics): wait() makes the caller's current stream wait for the done
// event (kStaged: the host first waits for the host collective, as gloo's wait() does) and
// rethrows a failure already known; synchronize() and is_completed() look at the host: the
// Work finishes once the operation completed and the done event passed, and its callbacks
// then run on the thread that saw it. A dropped unfinished Work keeps its buffers until
// then (tensor_work.h's orphans). The copy-back is skipped after a failure seen on the host;
// an NCCL failure found after the kernels were queued leaves the outputs undefined, as in
// PyTorch. Thread-safety: as Work; the caller's tensors must not be freed or reused before
// its stream waited (wait()), as with torch's own collectives.
#pragma once

#include <functional>

#include "tdist/work.h"
#include "tensor_work.h"

namespace tdist::torch {

// Makes `s` (its device a CUDA one) a kDevice or kStaged Staging for `group`.
void open_cuda(Staging& s, const ProcessGroup& group);

// launch() for kDevice and kStaged.
WorkPtr launch_cuda(const char* op, Staging staging, const std::function<WorkPtr()>& issue);

}  // namespace tdist::torch
