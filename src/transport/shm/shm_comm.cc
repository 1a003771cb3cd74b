// connect_shm_comm and shm_host_key: argument checks, setup, and the Engine.
#include "transport/shm/shm_comm.h"

#include "tdist/error.h"
#include "transport/shm/engine.h"
#include "transport/shm/setup.h"

namespace tdist::transport {

std::unique_ptr<Comm> connect_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const ShmCommOptions& options) {
  TDIST_CHECK(size >= 1, InvalidArgument, "shared-memory transport: world size ", size,
              " is not positive");
  TDIST_CHECK(rank >= 0 && rank < size, InvalidArgument, "shared-memory transport: rank ", rank,
              " is not in [0, ", size, ")");
  TDIST_CHECK(store != nullptr, InvalidArgument, "shared-memory transport: no store given");
  auto links =
      shm::link_peers(*store, rank, size, options.ring_bytes, Deadline::after(options.timeout));
  return std::make_unique<shm::Engine>(rank, size, std::move(links));
}

std::string shm_host_key() { return shm::host_key(); }

}  // namespace tdist::transport
