/* OpenMPI MPI_Allreduce latency for small messages (8 B .. 1 KiB), f32 sum: the
 * latency half of the comparison in docs/performance.md (the shared anchor starts at
 * 1 KiB). Usage: mpirun -np N ./mpi_allreduce_small */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  static float in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = 1.0f;
  for (int bytes = 8; bytes <= 1024; bytes *= 2) {
    const int n = bytes / 4, iters = 2000;
    for (int i = 0; i < 100; i++) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) / iters * 1e6;
    if (rank == 0) printf("openmpi-small bytes=%d time_us=%.1f\n", bytes, us);
  }
  MPI_Finalize();
  return 0;
}
