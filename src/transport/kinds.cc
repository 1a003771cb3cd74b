// The registered kinds of channel, in order of preference: the first that can reach a
// peer carries its traffic. Adding a transport = its folder plus one line here.
#include <functional>

#include "tdist/error.h"
#include "tdist/settings.h"
#include "transport/connect.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::transport {
namespace {

struct Registration {
  const char* name;
  std::function<std::unique_ptr<ChannelKind>()> make;
};

const std::vector<Registration>& registrations() {
  static const std::vector<Registration> kinds = {
      {"shm", [] { return make_shm_kind(ShmCommOptions::from_settings()); }},
      {"tcp", [] { return make_tcp_kind(TcpCommOptions::from_settings()); }},
  };
  return kinds;
}

}  // namespace

std::vector<std::string> registered_channel_kinds() {
  std::vector<std::string> names;
  for (const Registration& r : registrations()) names.emplace_back(r.name);
  return names;
}

ChannelKinds default_channel_kinds() {
  const std::string setting = setting_string("TDIST_CHANNELS");
  ChannelKinds kinds;
  size_t begin = 0;
  while (begin <= setting.size()) {
    size_t end = setting.find(',', begin);
    if (end == std::string::npos) end = setting.size();
    const std::string name = setting.substr(begin, end - begin);
    begin = end + 1;
    if (name.empty()) continue;
    const Registration* found = nullptr;
    for (const Registration& r : registrations()) {
      if (name == r.name) found = &r;
    }
    if (found == nullptr) {
      std::string names;
      for (const Registration& r : registrations())
        names += std::string(names.empty() ? "" : ", ") + r.name;
      TDIST_THROW(InvalidArgument, "TDIST_CHANNELS: unknown kind of channel '", name,
                  "'; registered kinds: ", names);
    }
    kinds.push_back(found->make());
  }
  TDIST_CHECK(!kinds.empty(), InvalidArgument, "TDIST_CHANNELS names no kind of channel");
  return kinds;
}

}  // namespace tdist::transport
