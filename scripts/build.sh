#!/usr/bin/env bash
# Configures and builds deltacast (Release) into build/. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDELTACAST_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
