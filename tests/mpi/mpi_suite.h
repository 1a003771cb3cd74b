// The process-group suite run by mpirun: every process is one rank of the default group,
// made by init_process_group(--backend) over env:// (under mpirun without MASTER_ADDR, so
// the store's address is agreed through MPI). Tests run in the same order on every rank
// and must issue the same collectives there: checks are non-fatal (EXPECT, ADD_FAILURE),
// never an early return that would leave the other ranks waiting. Test-only.
#pragma once

#include <string>

#include "tdist/process_group.h"

namespace tdist::mpi_test {

// The default group (set up by main before the tests run).
ProcessGroup& world();

// The --backend the suite runs on: "mpi" or "tcp".
const std::string& backend();

}  // namespace tdist::mpi_test
