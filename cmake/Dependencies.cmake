# Optional dependencies: each part is switched on when what it needs is found, and the
# configure step says which.
find_package(Threads REQUIRED)

find_package(GTest QUIET)
find_package(benchmark QUIET)

find_package(OpenSSL QUIET COMPONENTS Crypto)
find_package(MPI QUIET COMPONENTS C)
find_package(Torch QUIET)

set(TDIST_HAVE_CRYPTO ${OpenSSL_FOUND})
set(TDIST_HAVE_MPI ${MPI_C_FOUND})
set(TDIST_HAVE_TORCH ${Torch_FOUND})

function(tdist_report name found hint)
  if(found)
    message(STATUS "tdist: ${name}: found")
  else()
    message(STATUS "tdist: ${name}: not found (${hint})")
  endif()
endfunction()
tdist_report("tests (GoogleTest)" "${GTest_FOUND}" "apt-get install libgtest-dev libgmock-dev")
tdist_report("micro-benchmarks (Google Benchmark)" "${benchmark_FOUND}" "apt-get install libbenchmark-dev")
tdist_report("libcrypto (store authentication, a later issue)" "${TDIST_HAVE_CRYPTO}" "apt-get install libssl-dev")
tdist_report("OpenMPI (mpi backend, a later issue)" "${TDIST_HAVE_MPI}" "apt-get install libopenmpi-dev")
tdist_report("LibTorch (torch integration, a later issue)" "${TDIST_HAVE_TORCH}" "apt-get install libtorch-dev")
