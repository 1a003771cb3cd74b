/* OpenMPI MPI_Allreduce (f32 sum) time per size, with the iteration counts tdist-bench
 * gets in scripts/bench_peers.sh: 8 B..1 KiB (x2) 2000 iterations, 4 KiB..256 KiB (x4)
 * 500, from 1 MiB (x4) 20; each after a barrier and a tenth as many warm-up rounds.
 * Usage: mpirun -np N ./mpi_allreduce_sweep MAX_BYTES  (prints "bytes=B time_us=T") */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void run(long bytes, int iters, int rank) {
  const long n = bytes / 4;
  float* in = malloc(bytes);
  float* out = malloc(bytes);
  for (long i = 0; i < n; i++) in[i] = 1.0f;
  for (int i = 0; i < iters / 10 + 2; i++) {
    MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const double us = (MPI_Wtime() - t0) / iters * 1e6;
  if (rank == 0) printf("bytes=%ld time_us=%.2f\n", bytes, us);
  free(in);
  free(out);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const long max = argc > 1 ? atol(argv[1]) : (64L << 20);
  for (long b = 8; b <= 1024 && b <= max; b *= 2) run(b, 2000, rank);
  for (long b = 4096; b <= (256L << 10) && b <= max; b *= 4) run(b, 500, rank);
  for (long b = 1L << 20; b <= max; b *= 4) run(b, 20, rank);
  MPI_Finalize();
  return 0;
}
