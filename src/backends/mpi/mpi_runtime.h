// The MPI runtime under the mpi backend: initialisation, error translation, and the
// mapping of tdist's dtypes and reduce ops onto MPI datatypes and MPI_Ops. Internal to
// tdist; only src/backends/mpi includes <mpi.h>.
//
// Initialisation: ensure_initialized() calls MPI_Init_thread(MPI_THREAD_MULTIPLE) once
// when nobody initialised MPI, and then finalizes MPI at process exit (atexit); when the
// program initialised MPI itself, tdist never finalizes it. The backend needs
// MPI_THREAD_MULTIPLE (a group's worker, waiting callers, point-to-point posts and
// sub-groups call MPI concurrently; SERIALIZED behind one process-wide lock would
// deadlock a sub-group's collective against its parent's). A lower level is an Error
// saying so.
//
// Reductions: MPI's built-in ops where they compute exactly what tdist's kernels do
// (i32/i64 arithmetic, bitwise and bool ops, f32/f64 sum and prod); user-defined
// commutative MPI_Ops over tdist's kernels (src/core/reduce_kernels.h) for f16/bf16 (no
// MPI type), i8/u8 arithmetic (OpenMPI 4.1's AVX ops saturate 8-bit sums; tdist wraps)
// and float min/max (NaN propagates, as torch does). avg and premul_sum are a sum plus the
// kernels' finish/premultiply steps, done by the caller (mpi_group.cc).
//
// Thread-safety: every function may be called from any thread once MPI is initialised.
// Failures: check() turns an MPI return code into a tdist exception carrying
// MPI_Error_string: argument classes -> InvalidArgument, MPI_ERR_TRUNCATE (ranks
// disagree on a size) -> DesyncError, anything else -> PeerError.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::backends::mpi {

// Initialises MPI (once) as described above; throws Error when the thread level is
// below MPI_THREAD_MULTIPLE or MPI was already finalized.
void ensure_initialized();

// True when this process was started by OpenMPI's mpirun or MPI is already initialised.
bool under_mpi_launcher();

// Throws (see above) when rc != MPI_SUCCESS; `call` names the MPI function.
[[noreturn]] void throw_mpi_error(int rc, const char* call);
inline void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw_mpi_error(rc, call);
}

// The MPI datatype of one element of `dtype` (f16/bf16: committed 2-byte types of
// their own, which the user-defined ops recognise).
MPI_Datatype datatype(DType dtype);

// The MPI_Op reducing `dtype` with `op`'s kind (avg and premul_sum: the sum).
MPI_Op reduce_op(DType dtype, ReduceOpKind op);

// Collective over MPI_COMM_WORLD: rank 0 calls host_port() and every process returns
// its "host:port" (127.0.0.1 when every process shares rank 0's host, else rank 0's
// host name). An exception on rank 0 is rethrown on every process as Error.
std::string agree_on_address(const std::function<uint16_t()>& host_port);

}  // namespace tdist::backends::mpi
