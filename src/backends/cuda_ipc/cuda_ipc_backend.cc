// The `cuda_ipc` backend's factory (cuda_ipc_backend.h).
#include "backends/cuda_ipc/cuda_ipc_backend.h"

#include <utility>

#include "backends/comm/comm_group.h"
#include "backends/cuda_ipc/cuda_device.h"
#include "cuda/runtime.h"
#include "transport/cuda_ipc/cuda_ipc_comm.h"

namespace tdist::backends::cuda_ipc {

BackendFactory cuda_ipc_backend() {
  return [](std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout) {
    const int device = cuda::process_device("cuda_ipc");
    auto stream = std::make_shared<const transport::cuda_ipc::DeviceStream>(device);
    auto cuda = std::make_shared<CudaDevice>(stream);
    CommFactory factory = [stream](std::shared_ptr<Store> s, int r, int n,
                                   std::chrono::milliseconds t) {
      return transport::connect_cuda_ipc_comm(
          std::move(s), r, n, stream, t,
          "; backend 'cuda_ipc' needs every rank on one host: use 'nccl' across hosts");
    };
    return std::make_shared<CommProcessGroup>("cuda_ipc", std::move(factory), std::move(store),
                                              rank, size, timeout, std::vector<int>{},
                                              std::move(cuda));
  };
}

}  // namespace tdist::backends::cuda_ipc
