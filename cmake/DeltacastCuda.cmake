# DELTACAST_CUDA=AUTO compiles the CUDA sources when nvcc is found, ON insists,
# OFF never looks. The result is DELTACAST_HAVE_CUDA.
set(DELTACAST_HAVE_CUDA OFF)
if(NOT DELTACAST_CUDA STREQUAL "OFF" AND NOT DELTACAST_FUZZ)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Ampere and Hopper as real code, plus Hopper PTX so newer GPUs can JIT.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 support; teach it the flag.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(DELTACAST_HAVE_CUDA ON)
  elseif(DELTACAST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DELTACAST_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "deltacast: CUDA kernels ${DELTACAST_HAVE_CUDA}")

# Common settings of targets with CUDA sources. fmt 9 turns its constexpr off
# under nvcc, which leaves a constexpr function calling non-constexpr ones and
# breaks the host compiler in C++20 mode; nvcc 13 handles fmt's constexpr, so
# it is switched back on.
function(deltacast_cuda_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -DFMT_USE_CONSTEXPR=1>)
endfunction()
