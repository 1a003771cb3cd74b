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
# LibTorch 1.13's headers do not compile as C++20 with clang < 15 (incomplete c10::IValue
# in <torch/types.h>); such builds leave the torch part out and say so.
set(TDIST_TORCH_HINT "apt-get install libtorch-dev")
if(Torch_FOUND AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang"
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 15)
  set(TDIST_HAVE_TORCH FALSE)
  set(TDIST_TORCH_HINT "LibTorch's headers need g++ or clang >= 15 in C++20")
endif()

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
tdist_report("OpenMPI (mpi backend, MPI-agreed store under mpirun)" "${TDIST_HAVE_MPI}" "apt-get install libopenmpi-dev openmpi-bin")
tdist_report("LibTorch (tdist_torch: tensor collectives, DDP, sampler)" "${TDIST_HAVE_TORCH}" "${TDIST_TORCH_HINT}")
