# One warning set for every target of the project; third-party headers come in
# as SYSTEM includes so their warnings do not drown ours.
add_library(deltacast_warnings INTERFACE)
target_compile_options(deltacast_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Wimplicit-fallthrough -Wmissing-declarations>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DELTACAST_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DELTACAST_WERROR}>>:-Werror=all-warnings>)
# A unity build #includes each source into a batch, where GCC takes a class that holds a type of
# its own source's anonymous namespace for one declared in a header (-Wsubobject-linkage); in a
# source file that is fine.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(deltacast_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()
