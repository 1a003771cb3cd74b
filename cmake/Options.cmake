# Compiler warnings and sanitizers, applied to every tdist target through tdist_warnings.
add_library(tdist_warnings INTERFACE)
target_compile_options(tdist_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(TDIST_WERROR)
  target_compile_options(tdist_warnings INTERFACE -Werror)
endif()
if(TDIST_SANITIZE)
  add_compile_options(-fsanitize=${TDIST_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${TDIST_SANITIZE})
endif()
