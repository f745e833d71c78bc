# Finds Python (with its headers) and pybind11 for the extension module.
# Sets DELTACAST_HAVE_PYTHON. scikit-build-core passes the interpreter to
# use; a plain build takes the first python3 on the PATH, or
# -DPython_EXECUTABLE=... when given.
set(DELTACAST_HAVE_PYTHON OFF)
if(DELTACAST_PYTHON STREQUAL "OFF" OR DELTACAST_FUZZ OR DELTACAST_SANITIZE)
  return()
endif()
# The system interpreter first, as for the tests (tests/CMakeLists.txt): the module must load in it.
if(NOT DEFINED Python_EXECUTABLE AND NOT SKBUILD AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3)
endif()
set(PYBIND11_FINDPYTHON ON)
find_package(Python 3.8 COMPONENTS Interpreter Development.Module)
if(Python_FOUND)
  # pybind11 from the interpreter's site-packages (pip's build environment) or the system.
  execute_process(COMMAND ${Python_EXECUTABLE} -m pybind11 --cmakedir
                  OUTPUT_VARIABLE _pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_package(pybind11 CONFIG HINTS ${_pybind11_dir})
endif()
if(Python_FOUND AND pybind11_FOUND)
  set(DELTACAST_HAVE_PYTHON ON)
  message(STATUS "deltacast: Python extension ON (${Python_EXECUTABLE}, pybind11 ${pybind11_VERSION})")
elseif(DELTACAST_PYTHON STREQUAL "ON")
  message(FATAL_ERROR "DELTACAST_PYTHON=ON but Python development files or pybind11 were not found")
else()
  message(STATUS "deltacast: Python extension OFF (Python development files or pybind11 not found)")
endif()
