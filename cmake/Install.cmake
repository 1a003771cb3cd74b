# `cmake --install` puts headers, the libraries, a CMake package (find_package(tdist):
# tdist::tdist and, when LibTorch was found, tdist::torch) and pkg-config files (tdist,
# tdist-torch) under the prefix, with tdistrun in bin/ (tools/CMakeLists.txt).
include(CMakePackageConfigHelpers)
set(TDIST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tdist)

install(TARGETS tdist EXPORT tdistTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/tdist DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tdistTargets NAMESPACE tdist:: DESTINATION ${TDIST_CMAKE_DIR})

# The LibTorch part, tdist::torch: its own export set, so that find_package(tdist) loads it
# (and looks for LibTorch) only when it was built, and a consumer can leave it out
# (COMPONENTS tdist). The package records the LibTorch it was built against.
set(TDIST_INSTALLED_TORCH FALSE)
if(TARGET tdist_torch)
  set(TDIST_INSTALLED_TORCH TRUE)
  install(TARGETS tdist_torch EXPORT tdistTorchTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT tdistTorchTargets NAMESPACE tdist:: DESTINATION ${TDIST_CMAKE_DIR})
endif()

# A static libtdist carries its private dependencies to the consumer's link: pkg-config
# lists libssl, libcrypto, MPI's, and the CUDA runtime and NCCL (the CMake package names
# them in src/net and src/backends/CMakeLists.txt).
get_target_property(TDIST_LIBRARY_TYPE tdist TYPE)
set(TDIST_PC_EXTRA_LIBS "")
if(TDIST_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
  set(TDIST_PC_EXTRA_LIBS "${OPENSSL_SSL_LIBRARY} ${OPENSSL_CRYPTO_LIBRARY}")
  if(TDIST_HAVE_MPI)
    list(APPEND TDIST_PC_EXTRA_LIBS ${MPI_C_LIBRARIES})
  endif()
  if(TDIST_HAVE_NCCL)
    # With an rpath: the toolkit's folders are often outside the loader's search path.
    foreach(lib ${CUDA_cudart_LIBRARY} ${NCCL_LIBRARY})
      get_filename_component(dir ${lib} DIRECTORY)
      list(APPEND TDIST_PC_EXTRA_LIBS ${lib} -Wl,-rpath,${dir})
    endforeach()
  endif()
  list(JOIN TDIST_PC_EXTRA_LIBS " " TDIST_PC_EXTRA_LIBS)
endif()

configure_package_config_file(cmake/tdistConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/tdistConfig.cmake INSTALL_DESTINATION ${TDIST_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tdistConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tdistConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/tdistConfigVersion.cmake
        DESTINATION ${TDIST_CMAKE_DIR})

file(RELATIVE_PATH TDIST_PC_RELATIVE_PREFIX
     ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" TDIST_PC_RELATIVE_PREFIX "${TDIST_PC_RELATIVE_PREFIX}")
configure_file(cmake/tdist.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tdist.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tdist.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# tdist-torch.pc: LibTorch has no pkg-config file, so it carries LibTorch's flags as this
# build found them: its include folders and libraries (with an rpath unless they are in the
# compiler's own search path, as Debian's are), TORCH_CXX_FLAGS (1.13: the C++11 ABI).
if(TDIST_INSTALLED_TORCH)
  set(TDIST_PC_TORCH_CFLAGS "${TORCH_CXX_FLAGS}")
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      string(APPEND TDIST_PC_TORCH_CFLAGS " -I${dir}")
    endif()
  endforeach()
  get_filename_component(torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
  set(TDIST_PC_TORCH_LIBS "")
  if(NOT torch_libdir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(TDIST_PC_TORCH_LIBS "-L${torch_libdir} -Wl,-rpath,${torch_libdir} ")
  endif()
  string(APPEND TDIST_PC_TORCH_LIBS "-ltorch_cpu -lc10")  # the CPU part (src/torch/CMakeLists.txt)
  if(TARGET torch_cuda)  # CUDA tensors (TDIST_TORCH_CUDA): libtorch_cuda registers the kernels
    string(APPEND TDIST_PC_TORCH_LIBS " -Wl,--no-as-needed -ltorch_cuda -Wl,--as-needed -lc10_cuda")
    if(CUDA_cudart_LIBRARY)
      string(APPEND TDIST_PC_TORCH_LIBS " ${CUDA_cudart_LIBRARY}")
    endif()
  endif()
  if(TDIST_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")  # FashionMNIST's zlib
    find_package(ZLIB REQUIRED)
    list(JOIN ZLIB_LIBRARIES " " zlib_libs)
    string(APPEND TDIST_PC_TORCH_LIBS " ${zlib_libs}")
  endif()
  string(STRIP "${TDIST_PC_TORCH_CFLAGS}" TDIST_PC_TORCH_CFLAGS)
  configure_file(cmake/tdist-torch.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tdist-torch.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tdist-torch.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
