// The CUDA-IPC kind of channel and connect_cuda_ipc_comm (cuda_ipc_comm.h).
#include "transport/cuda_ipc/cuda_ipc_comm.h"

#include "transport/cuda_ipc/channel.h"
#include "transport/shm/channel.h"
#include "transport/shm/setup.h"
#include "transport/shm/shm_comm.h"

namespace tdist::transport {
namespace {

class CudaIpcKind final : public ChannelKind {
 public:
  explicit CudaIpcKind(std::shared_ptr<const cuda_ipc::DeviceStream> device)
      : device_(std::move(device)) {}
  const char* name() const override { return "cuda_ipc"; }
  bool can_connect(const std::string& a, const std::string& b) const override { return a == b; }

  ChannelTable connect(Store& store, int rank, int size, const std::vector<bool>& peers, int first,
                       Deadline deadline) const override {
    const ShmCommOptions shm_options = ShmCommOptions::from_settings();
    auto links = shm::link_peers(store, rank, size, peers, first, shm_options.ring_bytes, deadline);
    ChannelTable table(static_cast<size_t>(size));
    for (int peer = 0; peer < size; ++peer) {
      if (!peers[peer]) continue;
      table[peer].push_back(std::make_unique<cuda_ipc::CudaIpcChannel>(
          std::move(links[peer]), shm_options.single_copy_bytes, device_));
    }
    return table;
  }

 private:
  std::shared_ptr<const cuda_ipc::DeviceStream> device_;
};

}  // namespace

std::unique_ptr<ChannelKind> make_cuda_ipc_kind(
    std::shared_ptr<const cuda_ipc::DeviceStream> device) {
  return std::make_unique<CudaIpcKind>(std::move(device));
}

std::unique_ptr<Comm> connect_cuda_ipc_comm(std::shared_ptr<Store> store, int rank, int size,
                                            std::shared_ptr<const cuda_ipc::DeviceStream> device,
                                            std::chrono::milliseconds timeout,
                                            const std::string& unreachable_hint) {
  ChannelKinds kinds;
  kinds.push_back(make_cuda_ipc_kind(std::move(device)));
  ConnectOptions options;
  options.timeout = timeout;
  options.unreachable_hint = unreachable_hint;
  return connect_comm(std::move(store), rank, size, std::move(kinds), options);
}

}  // namespace tdist::transport
