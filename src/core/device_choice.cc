// The one rule for a process's CUDA device (device_choice.h).
#include "core/device_choice.h"

#include <charconv>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist {

DeviceChoice device_choice_from_env() {
  DeviceChoice choice;
  choice.device = setting_int("TDIST_NCCL_DEVICE");
  if (setting_is_set("TDIST_LOCAL_RANK")) {
    choice.local_rank = setting_string("TDIST_LOCAL_RANK");
    choice.local_rank_name = "TDIST_LOCAL_RANK";
  } else {
    choice.local_rank = env_string("LOCAL_RANK");
  }
  return choice;
}

int choose_device(int device_count, const DeviceChoice& choice, std::string_view who,
                  std::string_view hint) {
  if (choice.device >= 0) {
    TDIST_CHECK(choice.device < device_count, InvalidArgument, who,
                ": TDIST_NCCL_DEVICE=", choice.device, " but only ", device_count, " CUDA device",
                (device_count == 1 ? " is" : "s are"), " visible (0..", device_count - 1, ")");
    return static_cast<int>(choice.device);
  }
  const std::string_view text = choice.local_rank;
  if (text.empty()) return 0;
  int64_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TDIST_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= 0,
              InvalidArgument, who, ": ", choice.local_rank_name, "='", text,
              "' is not a non-negative integer", hint);
  return static_cast<int>(value % device_count);
}

}  // namespace tdist
