#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs the codec benchmark on
# the default RL-like trace (64 Mi bf16 elements, 3 optimizer steps), printing
# what moved, how fast, and whether it was bit-exact. Extra arguments go to
# `deltacast-bench codec` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/deltacast-bench codec "$@"
