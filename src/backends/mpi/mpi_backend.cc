// The `mpi` backend's factory and store agreement (mpi_backend.h).
#include "backends/mpi/mpi_backend.h"

#include <utility>

#include "backends/mpi/mpi_group.h"
#include "backends/mpi/mpi_runtime.h"
#include "tdist/error.h"

namespace tdist::backends::mpi {
namespace {

std::shared_ptr<ProcessGroup> make_world_group(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  ensure_initialized();
  int mpi_size = 0;
  check(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size), "MPI_Comm_size");
  TDIST_CHECK(mpi_size == size, Error, "mpi backend: the job has ", size,
              " ranks but MPI_COMM_WORLD has ", mpi_size,
              " processes; every rank must be an MPI process: start the job with mpirun -np ", size,
              " (env:// then takes ranks from OMPI_COMM_WORLD_RANK/SIZE)");
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &comm), "MPI_Comm_split");
  return std::make_shared<MpiProcessGroup>(comm, std::move(store), rank, size, timeout);
}

}  // namespace

BackendFactory mpi_backend() { return make_world_group; }

rendezvous_detail::StoreAgreement mpi_store_agreement() {
  return rendezvous_detail::StoreAgreement{"MPI", under_mpi_launcher, agree_on_address};
}

}  // namespace tdist::backends::mpi
