// The machine's memory bandwidth as bench_peers.sh needs it: THREADS threads, each bound
// to a core of its own (as the benchmark's ranks are) and each on arrays of its own far
// larger than the caches, run STREAM's add kernel (a[i] = b[i] + c[i], the shape of a
// two-input reduction) and a memcpy together; the best of REPS repetitions, counted as
// STREAM counts (bytes read plus bytes written; a store's read-for-ownership is not
// counted). Prints "membw threads= T add_GBps= X copy_GBps= Y".
// Usage: membw [THREADS] [MIB_PER_ARRAY] [REPS]   (2 128 8)
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int threads = 2;
static size_t n;  // doubles per array
static int reps = 8;
static pthread_barrier_t barrier;
static double add_best = 1e30, copy_best = 1e30;  // seconds, set by thread 0

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bind_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % CPU_SETSIZE, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort, as mpirun
}

static void* run(void* arg) {
  int id = (int)(long)arg;
  bind_to(id);
  double* a = aligned_alloc(64, n * sizeof(double));
  double* b = aligned_alloc(64, n * sizeof(double));
  double* c = aligned_alloc(64, n * sizeof(double));
  if (!a || !b || !c) {
    fprintf(stderr, "membw: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {  // first touch on this thread's core
    a[i] = 0;
    b[i] = (double)i;
    c[i] = 1;
  }
  for (int r = 0; r < reps; r++) {
    pthread_barrier_wait(&barrier);
    double t0 = now();
    for (size_t i = 0; i < n; i++) a[i] = b[i] + c[i];
    pthread_barrier_wait(&barrier);  // every thread done: the slowest sets the time
    double t1 = now();
    memcpy(c, b, n * sizeof(double));
    pthread_barrier_wait(&barrier);
    double t2 = now();
    if (id == 0) {
      if (t1 - t0 < add_best) add_best = t1 - t0;
      if (t2 - t1 < copy_best) copy_best = t2 - t1;
    }
  }
  volatile double sink = a[n / 2] + c[n / 3];  // keep the kernels
  (void)sink;
  free(a);
  free(b);
  free(c);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) threads = atoi(argv[1]);
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 128;
  if (argc > 3) reps = atoi(argv[3]);
  if (threads < 1 || mib < 1 || reps < 1) {
    fprintf(stderr, "usage: membw [THREADS] [MIB_PER_ARRAY] [REPS]\n");
    return 2;
  }
  n = mib * 1024 * 1024 / sizeof(double);
  pthread_barrier_init(&barrier, NULL, (unsigned)threads);
  pthread_t* ids = calloc((size_t)threads, sizeof(pthread_t));
  for (long t = 1; t < threads; t++) pthread_create(&ids[t], NULL, run, (void*)t);
  run(0);
  for (int t = 1; t < threads; t++) pthread_join(ids[t], NULL);
  double bytes = (double)threads * (double)n * sizeof(double);
  printf("membw threads= %d add_GBps= %.2f copy_GBps= %.2f\n", threads, 3 * bytes / add_best / 1e9,
         2 * bytes / copy_best / 1e9);
  return 0;
}
