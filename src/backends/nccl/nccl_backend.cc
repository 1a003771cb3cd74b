// The `nccl` backend's factory (nccl_backend.h).
#include "backends/nccl/nccl_backend.h"

#include <utility>

#include "backends/nccl/nccl_group.h"
#include "backends/nccl/nccl_runtime.h"
#include "cuda/runtime.h"

namespace tdist::backends::nccl {

BackendFactory nccl_backend() {
  return [](std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout) {
    const int device = cuda::process_device("nccl");
    return std::make_shared<NcclProcessGroup>(device, std::move(store), rank, size, timeout);
  };
}

}  // namespace tdist::backends::nccl
