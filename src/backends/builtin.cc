// The built-in backends (builtin.h).
#include "backends/builtin.h"

#include "backends/comm/comm_group.h"
#include "backends/comm/local_comms.h"
#if TDIST_HAVE_MPI
#include "backends/mpi/mpi_backend.h"
#endif
#if TDIST_HAVE_NCCL
#include "backends/nccl/nccl_backend.h"
#endif
#if TDIST_HAVE_CUDA_IPC
#include "backends/cuda_ipc/cuda_ipc_backend.h"
#endif

namespace tdist::backends {
namespace {

// A backend whose groups are CommProcessGroups over the Comms `factory` makes.
BackendFactory comm_backend(std::string name, CommFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](
             std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout) {
    return std::make_shared<CommProcessGroup>(name, factory, std::move(store), rank, size, timeout);
  };
}

}  // namespace

std::vector<std::pair<std::string, BackendFactory>> builtin_backends() {
  std::vector<std::pair<std::string, BackendFactory>> backends = {
      {"auto", comm_backend("auto", make_auto_comm)},
      {"shm", comm_backend("shm", make_shm_comm)},
      {"tcp", comm_backend("tcp", make_tcp_comm)},
  };
#if TDIST_HAVE_MPI
  backends.emplace_back("mpi", mpi::mpi_backend());
#endif
#if TDIST_HAVE_NCCL
  backends.emplace_back("nccl", nccl::nccl_backend());
#endif
#if TDIST_HAVE_CUDA_IPC
  backends.emplace_back("cuda_ipc", cuda_ipc::cuda_ipc_backend());
#endif
  return backends;
}

std::optional<rendezvous_detail::StoreAgreement> builtin_store_agreement() {
#if TDIST_HAVE_MPI
  return mpi::mpi_store_agreement();
#else
  return std::nullopt;
#endif
}

}  // namespace tdist::backends
