// The `mpi` backend's entry point, registered by name in src/backends/builtin.cc when
// tdist is built with MPI.
//
// mpi_backend() returns the factory of world groups and, as the registry's first use
// calls it, also installs MPI as the rendezvous layer's store agreement
// (rendezvous/store_agreement.h): under mpirun, env:// without MASTER_ADDR/MASTER_PORT
// then agrees on the store through MPI, for every backend (tcp, shm, auto, mpi).
//
// The factory initialises MPI when needed (mpi_runtime.h) and splits MPI_COMM_WORLD so
// that MPI ranks follow the rendezvous ranks; the job's world size must equal
// MPI_COMM_WORLD's (Error naming both otherwise: start it with mpirun -np N). Blocking:
// collective over every MPI process. Thread-safe as the registry.
#pragma once

#include "tdist/backend.h"

namespace tdist::backends::mpi {

BackendFactory mpi_backend();

}  // namespace tdist::backends::mpi
