# kvsim_warnings: the project's warning flags, as an interface target every kvsim target links.
add_library(kvsim_warnings INTERFACE)
target_compile_options(kvsim_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                            -Wnon-virtual-dtor -Woverloaded-virtual>)
if(KVSIM_WERROR)
  target_compile_options(kvsim_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# kvsim_options: language level and sanitizers.
add_library(kvsim_options INTERFACE)
target_compile_features(kvsim_options INTERFACE cxx_std_20)
if(KVSIM_SANITIZE)
  target_compile_options(kvsim_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(kvsim_options INTERFACE -fsanitize=address,undefined)
endif()
