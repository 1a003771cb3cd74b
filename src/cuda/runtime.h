// CUDA runtime helpers shared by the backends that run on a GPU (nccl, cuda_ipc): how many
// devices are visible, which one this process uses (core/device_choice.h's rule, the same
// as tdist::torch::local_device()'s), and CUDA's status codes as tdist exceptions.
// Built with the nccl backend (TDIST_HAVE_NCCL). Thread-safe: free functions.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace tdist::cuda {

// The number of visible CUDA devices; Error "<backend>: no CUDA device is visible: <why>"
// when there is none or the CUDA runtime cannot tell (no driver, no device).
int visible_devices(const char* backend);

// The device `backend`'s groups use in this process, from the environment
// (TDIST_NCCL_DEVICE, TDIST_LOCAL_RANK, LOCAL_RANK) and the visible devices; the errors of
// visible_devices() and choose_device() (core/device_choice.h).
int process_device(const char* backend);

// Throws Error "<what>: <CUDA's error string> (<error name>)" unless `rc` is cudaSuccess.
void check_cuda(cudaError_t rc, const std::string& what);

}  // namespace tdist::cuda
