# One warning set for every target of the project; third-party headers come in
# as SYSTEM includes so their warnings do not drown ours.
add_library(deltacast_warnings INTERFACE)
target_compile_options(deltacast_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Wimplicit-fallthrough -Wmissing-declarations>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DELTACAST_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DELTACAST_WERROR}>>:-Werror=all-warnings>)
