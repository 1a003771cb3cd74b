// local_device (device.h): TDIST_LOCAL_RANK / LOCAL_RANK -> cuda:(rank % device count).
#include "tdist/torch/device.h"

#include <torch/cuda.h>

#include <string>

#include "core/device_choice.h"
#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::torch {

c10::Device detail::local_device(int device_count, std::string_view tdist_local_rank,
                                 std::string_view local_rank) {
  TDIST_CHECK(device_count > 0, Error, "local_device: no CUDA device is visible",
              TDIST_TORCH_CUDA ? "" : " (tdist_torch was built against a LibTorch without CUDA)");
  DeviceChoice choice;  // TDIST_NCCL_DEVICE is the nccl backend's alone
  const bool own = !tdist_local_rank.empty();
  choice.local_rank = own ? tdist_local_rank : local_rank;
  choice.local_rank_name = own ? "TDIST_LOCAL_RANK" : "LOCAL_RANK";
  return {c10::kCUDA, static_cast<c10::DeviceIndex>(choose_device(device_count, choice, "local_device"))};
}

c10::Device local_device() {
  return detail::local_device(static_cast<int>(::torch::cuda::device_count()),
                              env_string("TDIST_LOCAL_RANK"), env_string("LOCAL_RANK"));
}

}  // namespace tdist::torch
