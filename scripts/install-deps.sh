#!/usr/bin/env bash
# Installs what deltacast needs to build and test, from Debian's packages.
# Idempotent and quick when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-dev
  libgtest-dev libzstd-dev libxxhash-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev prometheus-cpp-dev libssl-dev libipsec-mb-dev
  python3 python3-pytest python3-matplotlib iproute2 iptables
  python3-dev python3-venv python3-pip python3-numpy python3-torch pybind11-dev
  libibverbs-dev librdmacm-dev ibverbs-providers
  qemu-system-x86 busybox-static cpio kmod
)

# checkpoint-engine's wheel, whose source tests/python/compat/test_compat_api.py reads (never imports) to
# hold deltacast.compat to its API. A download, not an install: nothing of it runs here.
fetch_reference_wheels() {
  local dir="${DELTACAST_PYPI_CACHE:-$HOME/.cache/deltacast/pypi}"
  if ! compgen -G "$dir/checkpoint_engine-0.4.2-*.whl" >/dev/null; then
    echo "install-deps: downloading checkpoint-engine 0.4.2's wheel into $dir"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$dir" checkpoint-engine==0.4.2
  fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  fetch_reference_wheels
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
fetch_reference_wheels
