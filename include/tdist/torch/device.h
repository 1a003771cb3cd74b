// The CUDA device of this process, as torchrun's users pick it: cuda:(local rank modulo
// the visible devices). The local rank is TDIST_LOCAL_RANK when set, else LOCAL_RANK (set by
// torchrun and tdistrun), else 0; the nccl backend picks its device the same way (unless
// TDIST_NCCL_DEVICE says otherwise), so a model moved to local_device() is on the group's
// device.
//
//   const c10::Device device = tdist::torch::local_device();  // cuda:1 for LOCAL_RANK=1
//   model->to(device);
//
// Failures: Error when no CUDA device is visible (or tdist_torch was built against a
// LibTorch without CUDA); InvalidArgument for a local rank that is not a non-negative
// integer. Thread-safe (reads the environment).
#pragma once

#include <c10/core/Device.h>

#include <string_view>

namespace tdist::torch {

c10::Device local_device();

namespace detail {
// local_device() with the device count and the two variables' texts given ("" = unset).
c10::Device local_device(int device_count, std::string_view tdist_local_rank,
                         std::string_view local_rank);
}  // namespace detail

}  // namespace tdist::torch
