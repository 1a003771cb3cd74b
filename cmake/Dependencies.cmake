# Optional dependencies: each part is switched on when what it needs is found, and the
# configure step says which.
find_package(Threads REQUIRED)

find_package(GTest QUIET)
find_package(benchmark QUIET)

# libcrypto: HMAC-SHA256 authentication of store and transport connections (src/net/auth);
# libssl: their optional mutual TLS (src/net/tls).
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
# nlohmann-json (header-only; Debian nlohmann-json3-dev): every JSON tdist writes or reads
# (flight records, timelines, error files, the status reply, tdistrun's failure records).
find_package(nlohmann_json 3.2 REQUIRED)
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

# CUDA and NCCL: the `nccl` backend (src/backends/nccl). TDIST_CUDA: AUTO builds it when
# the CUDA toolkit and NCCL are found, ON requires them, OFF leaves them out. NCCL is looked
# for in NCCL_ROOT (CMake variable or environment) and then in the toolkit's own folders
# (CUDA 13 ships it in /usr/local/cuda).
set(TDIST_CUDA AUTO CACHE STRING "Build the nccl backend: AUTO (when CUDA and NCCL are found), ON, OFF")
set_property(CACHE TDIST_CUDA PROPERTY STRINGS AUTO ON OFF)
set(TDIST_HAVE_NCCL FALSE)
set(TDIST_CUDA_HINT "-DTDIST_CUDA=OFF")
if(NOT TDIST_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h
              HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl
                 HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h nccl_version_lines
           REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
      set(NCCL_VERSION "")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX REPLACE ".*#define NCCL_${part} +([0-9]+).*" "\\1" v "${nccl_version_lines}")
        list(APPEND NCCL_VERSION ${v})
      endforeach()
      list(JOIN NCCL_VERSION "." NCCL_VERSION)
      set(TDIST_HAVE_NCCL TRUE)
      add_library(tdist_nccl UNKNOWN IMPORTED)
      set_target_properties(tdist_nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                            INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    else()
      set(TDIST_CUDA_HINT "NCCL not found: set NCCL_ROOT to the folder holding include/nccl.h "
                          "and lib/libnccl.so, or -DTDIST_CUDA=OFF")
    endif()
  else()
    set(TDIST_CUDA_HINT "no CUDA toolkit: put nvcc on PATH or set CUDAToolkit_ROOT, or -DTDIST_CUDA=OFF")
  endif()
  if(TDIST_CUDA STREQUAL "ON" AND NOT TDIST_HAVE_NCCL)
    message(FATAL_ERROR "tdist: TDIST_CUDA=ON but CUDA/NCCL are missing: ${TDIST_CUDA_HINT}")
  endif()
else()
  set(TDIST_CUDA_HINT "TDIST_CUDA=OFF")
endif()

# The cuda_ipc backend (src/backends/cuda_ipc, src/transport/cuda_ipc): with the nccl
# backend's CUDA, plus its reduction kernels compiled by nvcc (CMake's CUDA language, for
# TDIST_CUDA_ARCHITECTURES: A100 and H100/H200 code, and PTX for later GPUs).
# TDIST_CUDA_IPC=OFF leaves it out.
option(TDIST_CUDA_IPC "Build the cuda_ipc backend when CUDA is built and nvcc works" ON)
set(TDIST_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "GPU architectures of the cuda_ipc kernels")
set(TDIST_HAVE_CUDA_IPC FALSE)
set(TDIST_CUDA_IPC_HINT "${TDIST_CUDA_HINT}")
if(TDIST_HAVE_NCCL AND TDIST_CUDA_IPC)
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${TDIST_CUDA_ARCHITECTURES})
    endif()
    enable_language(CUDA)
    set(TDIST_HAVE_CUDA_IPC TRUE)
  else()
    set(TDIST_CUDA_IPC_HINT "no working nvcc for CUDA kernels")
  endif()
elseif(NOT TDIST_CUDA_IPC)
  set(TDIST_CUDA_IPC_HINT "TDIST_CUDA_IPC=OFF")
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
if(TDIST_HAVE_NCCL)
  message(STATUS "tdist: CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_VERSION} (nccl backend): found")
else()
  tdist_report("CUDA and NCCL (nccl backend)" FALSE "${TDIST_CUDA_HINT}")
endif()
tdist_report("CUDA kernels (cuda_ipc backend)" "${TDIST_HAVE_CUDA_IPC}" "${TDIST_CUDA_IPC_HINT}")
if(TDIST_HAVE_TORCH)
  message(STATUS "tdist: LibTorch ${Torch_VERSION} (tdist_torch: tensor collectives, DDP, sampler): "
                 "found at ${TDIST_TORCH_PREFIX}")
else()
  tdist_report("LibTorch (tdist_torch: tensor collectives, DDP, sampler)" FALSE "${TDIST_TORCH_HINT}")
endif()
