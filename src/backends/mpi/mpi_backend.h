// The `mpi` backend's entry points, registered by name in src/backends/builtin.cc when
// tdist is built with MPI.
//
// mpi_backend() returns the factory of world groups. mpi_store_agreement() is MPI as
// the rendezvous layer's store agreement (rendezvous/store_agreement.h), which
// builtin.cc hands to every rendezvous(init_method): under mpirun, env:// without
// MASTER_ADDR/MASTER_PORT agrees on the store through MPI, for every backend (tcp, shm,
// auto, mpi). It applies when OMPI_COMM_WORLD_SIZE is set or MPI is initialised.
//
// The factory initialises MPI when needed (mpi_runtime.h) and splits MPI_COMM_WORLD so
// that MPI ranks follow the rendezvous ranks; the job's world size must equal
// MPI_COMM_WORLD's (Error naming both otherwise: start it with mpirun -np N). Blocking:
// collective over every MPI process. Thread-safe as the registry.
#pragma once

#include "rendezvous/store_agreement.h"
#include "tdist/backend.h"

namespace tdist::backends::mpi {

BackendFactory mpi_backend();
rendezvous_detail::StoreAgreement mpi_store_agreement();

}  // namespace tdist::backends::mpi
