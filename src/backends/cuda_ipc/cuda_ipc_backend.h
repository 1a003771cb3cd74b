// The `cuda_ipc` backend: CommProcessGroups on CUDA device memory for ranks of one host,
// over CUDA-IPC channels (transport/cuda_ipc): the only way to run several ranks on one
// GPU, which NCCL refuses.
//
// Device: TDIST_NCCL_DEVICE when set, else LOCAL_RANK modulo the visible devices, else 0
// (the nccl backend's choice: nccl_runtime.h). Groups take device memory of that device
// only (memory_kinds() = kCuda; cudaMalloc memory, e.g. PyTorch's caching allocator), run
// every collective of tdist with its algorithms and device kernels on one stream of their
// own, ordered after the caller's stream (CallerStream), and complete their Works with the
// device work (DeviceWork::cuda_event()). Subgroups share the stream.
// Failure: Error "cuda_ipc: no CUDA device is visible: ..." at once, before any
// rendezvous, where there is none (so no rank waits for another); InvalidArgument naming
// a rank on another host; then as the shm transport and CommProcessGroup. Thread-safety:
// the factory may be called from any thread.
#pragma once

#include "tdist/backend.h"

namespace tdist::backends::cuda_ipc {

BackendFactory cuda_ipc_backend();

}  // namespace tdist::backends::cuda_ipc
