# Every third-party library comes from the system (Debian's -dev packages);
# scripts/install-deps.sh installs them.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(zstd REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
# libcrypto (OpenSSL 3): the handshake's HMAC and HKDF, the frames' AES-256-GCM, the random source.
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)
# Intel's multi-buffer crypto library (libipsec-mb-dev) computes the same AES-256-GCM as libcrypto
# with the CPU's wide vector instructions (core/trust/aes_gcm.h). AUTO builds it in where it is
# found; without it libcrypto does all of it.
set(DELTACAST_IPSEC_MB AUTO CACHE STRING "Seal frames with ipsec-mb where the CPU allows: AUTO (when found), ON or OFF")
set_property(CACHE DELTACAST_IPSEC_MB PROPERTY STRINGS AUTO ON OFF)
set(DELTACAST_HAVE_IPSEC_MB OFF)
if(NOT DELTACAST_IPSEC_MB STREQUAL "OFF")
  find_path(IPSEC_MB_INCLUDE_DIR intel-ipsec-mb.h)
  find_library(IPSEC_MB_LIBRARY NAMES IPSec_MB)
  if(IPSEC_MB_INCLUDE_DIR AND IPSEC_MB_LIBRARY)
    # The direct GMAC calls and the per-architecture managers deltacast uses came with ipsec-mb 1.0;
    # an older library is passed over like a missing one.
    include(CheckSymbolExists)
    set(CMAKE_REQUIRED_INCLUDES ${IPSEC_MB_INCLUDE_DIR})
    set(CMAKE_REQUIRED_LIBRARIES ${IPSEC_MB_LIBRARY})
    check_symbol_exists(IMB_AES256_GMAC_UPDATE intel-ipsec-mb.h DELTACAST_IPSEC_MB_HAS_GMAC)
    check_symbol_exists(init_mb_mgr_avx512 intel-ipsec-mb.h DELTACAST_IPSEC_MB_HAS_MANAGERS)
    unset(CMAKE_REQUIRED_INCLUDES)
    unset(CMAKE_REQUIRED_LIBRARIES)
  endif()
  if(DELTACAST_IPSEC_MB_HAS_GMAC AND DELTACAST_IPSEC_MB_HAS_MANAGERS)
    set(DELTACAST_HAVE_IPSEC_MB ON)
    add_library(deltacast::ipsec_mb INTERFACE IMPORTED)
    set_target_properties(deltacast::ipsec_mb PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES ${IPSEC_MB_INCLUDE_DIR} INTERFACE_LINK_LIBRARIES ${IPSEC_MB_LIBRARY})
  endif()
endif()
if(DELTACAST_IPSEC_MB STREQUAL "ON" AND NOT DELTACAST_HAVE_IPSEC_MB)
  message(FATAL_ERROR "DELTACAST_IPSEC_MB=ON but ipsec-mb 1.0 or later (libipsec-mb-dev) was not found")
endif()
message(STATUS "deltacast: ipsec-mb AES-GCM ${DELTACAST_HAVE_IPSEC_MB}")
# libxxhash ships only a pkg-config file; fall back to a plain search where
# pkg-config itself is missing (GPU machines with carried packages).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(XXHASH IMPORTED_TARGET libxxhash)
endif()
if(NOT TARGET PkgConfig::XXHASH)
  find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
  find_library(XXHASH_LIBRARY NAMES xxhash REQUIRED)
  add_library(PkgConfig::XXHASH INTERFACE IMPORTED)
  set_target_properties(PkgConfig::XXHASH PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${XXHASH_INCLUDE_DIR} INTERFACE_LINK_LIBRARIES ${XXHASH_LIBRARY})
endif()

if(TARGET zstd::libzstd_shared)
  set(DELTACAST_ZSTD_TARGET zstd::libzstd_shared)
else()
  set(DELTACAST_ZSTD_TARGET zstd::libzstd_static)
endif()

# rdma-core (libibverbs, librdmacm) for the RDMA backend: AUTO builds it where
# the headers are, OFF leaves it out (the TCP backend stands in, saying so).
set(DELTACAST_RDMA AUTO CACHE STRING "Build the RDMA verbs backend: AUTO (when rdma-core is found), ON or OFF")
set_property(CACHE DELTACAST_RDMA PROPERTY STRINGS AUTO ON OFF)
set(DELTACAST_HAVE_RDMA OFF)
if(NOT DELTACAST_RDMA STREQUAL "OFF" AND PkgConfig_FOUND)
  pkg_check_modules(RDMA IMPORTED_TARGET libibverbs librdmacm)
  if(TARGET PkgConfig::RDMA)
    set(DELTACAST_HAVE_RDMA ON)
  endif()
endif()
if(DELTACAST_RDMA STREQUAL "ON" AND NOT DELTACAST_HAVE_RDMA)
  message(FATAL_ERROR "DELTACAST_RDMA=ON but rdma-core (libibverbs-dev, librdmacm-dev) was not found")
endif()
message(STATUS "deltacast: RDMA backend ${DELTACAST_HAVE_RDMA}")

# prometheus-cpp (prometheus-cpp-dev) serves the engine's metrics over HTTP. Built in where it is
# found; without it a producer or consumer asked for metrics refuses, saying so.
find_package(prometheus-cpp CONFIG QUIET)
set(DELTACAST_HAVE_METRICS OFF)
if(TARGET prometheus-cpp::pull)
  set(DELTACAST_HAVE_METRICS ON)
endif()
message(STATUS "deltacast: Prometheus metrics ${DELTACAST_HAVE_METRICS}")
