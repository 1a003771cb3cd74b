# `cmake --install` puts headers, the library, a CMake package (find_package(tdist))
# and a pkg-config file (pkg-config --cflags --libs tdist) under the prefix.
include(CMakePackageConfigHelpers)
set(TDIST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tdist)

install(TARGETS tdist EXPORT tdistTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/tdist DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tdistTargets NAMESPACE tdist:: DESTINATION ${TDIST_CMAKE_DIR})

# A static libtdist carries its private dependencies to the consumer's link: pkg-config
# lists MPI's libraries (the mpi backend; the CMake package names them in
# src/backends/CMakeLists.txt).
get_target_property(TDIST_LIBRARY_TYPE tdist TYPE)
set(TDIST_PC_EXTRA_LIBS "")
if(TDIST_HAVE_MPI AND TDIST_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
  list(JOIN MPI_C_LIBRARIES " " TDIST_PC_EXTRA_LIBS)
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
