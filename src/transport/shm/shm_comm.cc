// The shared-memory kind of channel, connect_shm_comm and shm_host_key.
#include "transport/shm/shm_comm.h"

#include "tdist/error.h"
#include "tdist/settings.h"
#include "transport/shm/channel.h"
#include "transport/shm/setup.h"
#include "transport/shm/single_copy.h"

namespace tdist::transport {
namespace {

class ShmKind final : public ChannelKind {
 public:
  explicit ShmKind(const ShmCommOptions& options) : options_(options) {}
  const char* name() const override { return "shm"; }
  bool can_connect(const std::string& a, const std::string& b) const override { return a == b; }

  ChannelTable connect(Store& store, int rank, int size, const std::vector<bool>& peers, int first,
                       Deadline deadline) const override {
    auto links = shm::link_peers(store, rank, size, peers, first, options_.ring_bytes, deadline);
    ChannelTable table(static_cast<size_t>(size));
    for (int peer = 0; peer < size; ++peer) {
      if (peers[peer]) {
        table[peer].push_back(
            std::make_unique<shm::ShmChannel>(std::move(links[peer]), options_.single_copy_bytes));
      }
    }
    return table;
  }

 private:
  ShmCommOptions options_;
};

}  // namespace

ShmCommOptions ShmCommOptions::from_settings() {
  ShmCommOptions o;
  o.ring_bytes = static_cast<size_t>(setting_int("TDIST_SHM_RING_BYTES"));
  // Never negative: the registry refuses values outside 0..2^62. Unset, the default where
  // a single copy beats the rings here (measured once per process), else off.
  const char* single_copy = "TDIST_SHM_SINGLE_COPY_BYTES";
  if (setting_is_set(single_copy) || shm::single_copy_pays()) {
    o.single_copy_bytes = static_cast<size_t>(setting_int(single_copy));
  } else {
    o.single_copy_bytes = 0;
  }
  return o;
}

std::unique_ptr<ChannelKind> make_shm_kind(const ShmCommOptions& options) {
  return std::make_unique<ShmKind>(options);
}

std::unique_ptr<Comm> connect_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const ShmCommOptions& options,
                                       const std::string& unreachable_hint) {
  ChannelKinds kinds;
  kinds.push_back(make_shm_kind(options));
  ConnectOptions connect;
  connect.timeout = options.timeout;
  connect.unreachable_hint = unreachable_hint;
  return connect_comm(std::move(store), rank, size, std::move(kinds), connect);
}

std::string shm_host_key() { return shm::host_key(); }

}  // namespace tdist::transport
