#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs `deltacast-bench sync`:
# a producer and 4 consumer processes over 2 loopback rails, a full sync and 5
# sparse versions of an RL-like trace, printing what moved, how fast (with a
# dense and, where PyTorch imports, a gloo baseline) and whether every version
# was bit-exact on every consumer. Extra arguments go to `deltacast-bench sync`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/deltacast-bench sync "$@"
