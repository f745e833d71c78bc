#!/usr/bin/env bash
# The tests against the real RL frameworks (verl's checkpoint-engine manager and workers on a Ray
# cluster on this CPU; TRL's weight transfer against the real vLLM; SGLang's loader on SGLang's own
# model classes), in the environment
# scripts/install-frameworks.sh makes, with the build
# tree's deltacast on PYTHONPATH. DELTACAST_SKIP_FRAMEWORKS=1 skips them (77).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "${DELTACAST_SKIP_FRAMEWORKS:-0}" = 1 ]; then
  echo "python_frameworks: skipped (DELTACAST_SKIP_FRAMEWORKS=1)"
  exit 77
fi
venv="$("$here/../../../scripts/install-frameworks.sh")"
export PYTHONPATH="$here/../vllm${PYTHONPATH:+:$PYTHONPATH}"  # tiny_model: the test model's checkpoints
cd "$(mktemp -d)"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -o log_cli=false "$here" "$@"
