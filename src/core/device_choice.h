// The CUDA device a process uses, chosen by one rule for every part of tdist that picks one
// (the nccl and cuda_ipc backends, tdist::torch::local_device()), so that they agree:
// the TDIST_NCCL_DEVICE setting when it is not -1, else the local rank (TDIST_LOCAL_RANK
// when set, else torchrun's LOCAL_RANK) modulo the visible devices, else device 0.
// No CUDA here: the caller counts the devices. Thread-safe: pure functions, except
// device_choice_from_env(), which reads the environment once per call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tdist {

// What the environment says about the device; "" for a variable that is unset.
struct DeviceChoice {
  int64_t device = -1;                       // TDIST_NCCL_DEVICE (-1: not given)
  std::string local_rank;                    // its text
  std::string local_rank_name = "LOCAL_RANK";  // TDIST_LOCAL_RANK or LOCAL_RANK
};

// TDIST_NCCL_DEVICE (checked by the settings registry), TDIST_LOCAL_RANK, else LOCAL_RANK.
DeviceChoice device_choice_from_env();

// The device among `device_count` (> 0) visible ones. InvalidArgument, starting "<who>: ",
// when `device` is not visible or the local rank is not a non-negative integer (with
// `hint` appended to that message, e.g. how to choose the device instead).
int choose_device(int device_count, const DeviceChoice& choice, std::string_view who,
                  std::string_view hint = {});

}  // namespace tdist
