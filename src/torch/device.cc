// local_device (device.h): TDIST_LOCAL_RANK / LOCAL_RANK -> cuda:(rank % device count).
#include "tdist/torch/device.h"

#include <torch/cuda.h>

#include <charconv>
#include <string>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::torch {

c10::Device detail::local_device(int device_count, std::string_view tdist_local_rank,
                                 std::string_view local_rank) {
  TDIST_CHECK(device_count > 0, Error, "local_device: no CUDA device is visible",
              TDIST_TORCH_CUDA ? "" : " (tdist_torch was built against a LibTorch without CUDA)");
  const bool own = !tdist_local_rank.empty();
  const std::string_view text = own ? tdist_local_rank : local_rank;
  if (text.empty()) return {c10::kCUDA, 0};
  int64_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TDIST_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= 0, InvalidArgument,
              "local_device: ", own ? "TDIST_LOCAL_RANK" : "LOCAL_RANK", "='", text,
              "' is not a non-negative integer");
  return {c10::kCUDA, static_cast<c10::DeviceIndex>(value % device_count)};
}

c10::Device local_device() {
  return detail::local_device(static_cast<int>(::torch::cuda::device_count()),
                              env_string("TDIST_LOCAL_RANK"), env_string("LOCAL_RANK"));
}

}  // namespace tdist::torch
