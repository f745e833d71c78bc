# Every third-party library comes from the system (Debian's -dev packages);
# scripts/install-deps.sh installs them.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(zstd REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

if(TARGET zstd::libzstd_shared)
  set(DELTACAST_ZSTD_TARGET zstd::libzstd_shared)
else()
  set(DELTACAST_ZSTD_TARGET zstd::libzstd_static)
endif()
