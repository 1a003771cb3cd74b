# Optional dependencies: each part is switched on when what it needs is found, and the
# configure step says which.
find_package(Threads REQUIRED)

find_package(GTest QUIET)
find_package(benchmark QUIET)

# libcrypto: HMAC-SHA256 authentication of store and transport connections (src/net/auth);
# libssl: their optional mutual TLS (src/net/tls).
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
find_package(MPI QUIET COMPONENTS C)
# LibTorch: Debian's 1.13 (libtorch-dev) or PyPI's 2.x wheel, whose TorchConfig also
# enables CUDA (it needs a CUDA toolkit, e.g. /usr/local/cuda, even for CPU-only use) and
# would copy CMAKE_CXX_STANDARD (20) to CUDA, which CMake < 3.27 cannot set for nvcc; tdist
# compiles no CUDA, so 17 keeps it happy. For the wheel, pass
#   -DCMAKE_PREFIX_PATH="$T/share/cmake;$T"   (T = the torch package's folder)
# the second entry makes TorchConfig find the wheel's own libtorch.so and libc10.so before
# Debian's in /usr/lib (checked below).
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
find_package(Torch QUIET)
if(Torch_FOUND)
  set(TDIST_TORCH_PREFIX "${TORCH_INSTALL_PREFIX}")
  foreach(lib TORCH_LIBRARY c10_LIBRARY)
    cmake_path(IS_PREFIX TDIST_TORCH_PREFIX "${${lib}}" NORMALIZE lib_in_prefix)
    if(NOT lib_in_prefix)
      message(FATAL_ERROR "tdist: LibTorch ${Torch_VERSION} at ${TDIST_TORCH_PREFIX} resolved "
              "${lib} to ${${lib}}, another LibTorch's library. Put the LibTorch folder itself "
              "in CMAKE_PREFIX_PATH too: -DCMAKE_PREFIX_PATH=\"${TDIST_TORCH_PREFIX}/share/cmake;"
              "${TDIST_TORCH_PREFIX}\" (and start from an empty build folder)")
    endif()
  endforeach()
endif()

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
tdist_report("OpenMPI (mpi backend, MPI-agreed store under mpirun)" "${TDIST_HAVE_MPI}" "apt-get install libopenmpi-dev openmpi-bin")
if(TDIST_HAVE_TORCH)
  message(STATUS "tdist: LibTorch ${Torch_VERSION} (tdist_torch: tensor collectives, DDP, sampler): "
                 "found at ${TDIST_TORCH_PREFIX}")
else()
  tdist_report("LibTorch (tdist_torch: tensor collectives, DDP, sampler)" FALSE "${TDIST_TORCH_HINT}")
endif()
