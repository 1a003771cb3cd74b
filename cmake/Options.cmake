# Compiler warnings and sanitizers, applied to every tdist target through tdist_warnings.
add_library(tdist_warnings INTERFACE)
target_compile_options(tdist_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wnon-virtual-dtor -Wno-missing-field-initializers)
# Lock rules (include/tdist/thread_annotations.h), checked by clang.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  target_compile_options(tdist_warnings INTERFACE -Wthread-safety -Wthread-safety-beta)
endif()
if(TDIST_WERROR)
  target_compile_options(tdist_warnings INTERFACE -Werror)
endif()
# TDIST_SANITIZE (address,undefined or thread) instruments every target of the tree: the
# library, tests, the programs they start and the tools. A UBSan finding aborts, so it
# fails its test. The runtimes' options and suppressions for the tests: scripts/run_tests.sh
# and tests/sanitizers/.
set_property(CACHE TDIST_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")
if(TDIST_SANITIZE)
  # C and C++ only: nvcc takes none of these (the cuda_ipc kernels run uninstrumented).
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${TDIST_SANITIZE};-fno-omit-frame-pointer>")
  if(TDIST_SANITIZE MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>")
  endif()
  add_link_options(-fsanitize=${TDIST_SANITIZE})
endif()

# lld links a test program against the static libtdist (debug info included) in a third of
# ld.bfd's time; about seventy programs per tree. C++ links only: nvcc does not take it.
if(TDIST_USE_LLD)
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld TDIST_HAVE_LLD)
  if(TDIST_HAVE_LLD)
    add_link_options("$<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>")
  endif()
endif()
