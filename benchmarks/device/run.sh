#!/usr/bin/env bash
# The GPU check, in one command on a machine with a CUDA GPU: builds with
# CUDA, runs every test (the GPU parity tests included), then runs
# `deltacast-bench kernels --json` and the PyTorch baseline on the same
# model, and prints the table. Logs and JSON go to $OUT (or build-gpu/out).
#
# Without the Debian -dev packages installed, carry .deps/ (made by
# benchmarks/device/fetch-deps.sh): they are unpacked into a private prefix.
# `run.sh tests` stops after the tests (GPU Python tests included: the Python
# extension is built for the python3 on the PATH, which holds torch there);
# `run.sh compat` builds and runs only the checkpoint-engine comparison
# (compat_bench.py; checkpoint-engine's wheels come from .deps/pypi).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-gpu/out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # absolute: the tests run from build-gpu/
elements="${DELTACAST_KERNEL_ELEMENTS:-4294967296}"

if [ -d .deps ] && ls .deps/*.deb >/dev/null 2>&1; then
  prefix=/tmp/deltacast-deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in .deps/*.deb; do dpkg-deb -x "$deb" "$prefix" 2>/dev/null || (cd "$prefix" && ar p "$OLDPWD/$deb" data.tar.xz | tar xJ); done
  arch_lib="$prefix/usr/lib/x86_64-linux-gnu"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$arch_lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$arch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$arch_lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$prefix"
  export PATH="$prefix/usr/bin:$PATH"
  echo "run.sh: using the packages of .deps/ unpacked in $prefix"
fi

echo "== build (CUDA on)"
python_args=()
if pybind11_dir="$(python3 -m pybind11 --cmakedir 2>/dev/null)"; then
  python_args=(-DPython_EXECUTABLE="$(command -v python3)" -Dpybind11_DIR="$pybind11_dir")
fi
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DDELTACAST_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
  "${python_args[@]}" 2>&1 | tee "$out/configure.log" | grep -E "deltacast|Error" || true
cmake --build build-gpu -j"$(nproc)" 2>&1 | tail -n 5 | tee "$out/build.log"

# The checkpoint-engine script with CUDA weights on deltacast and on checkpoint-engine 0.4.2.
run_compat() {
  echo "== checkpoint-engine drop-in: one script on deltacast and on checkpoint-engine 0.4.2 (CUDA weights)"
  local site_args=()
  if ls .deps/pypi/*.whl >/dev/null 2>&1; then
    rm -rf /tmp/ce-site
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ce-site .deps/pypi/*.whl &&
      site_args=(--site /tmp/ce-site)
  fi
  PYTHONPATH=build-gpu/python python3 benchmarks/device/compat_bench.py "${site_args[@]}" | tee "$out/compat.json"
}
if [ "${1:-all}" = compat ]; then
  run_compat
  exit $?
fi

echo "== tests (GPU parity included)"
# The unit and GPU tests; the namespace and VM suites need the host tooling CI has.
# A failing test does not stop the benchmarks; the script's exit status reports it at the end.
tests_rc=0
(cd build-gpu && ctest --output-on-failure -L 'unit|gpu' -j"$(nproc)" 2>&1 | tee "$out/ctest.log" | tail -n 15) || tests_rc=$?
[ "${1:-all}" = tests ] && exit "$tests_rc"

# Both layouts: a dense transformer (155 large tensors at 4 Gi elements) and a
# fine-grained MoE (about 13,000 tensors), where per-tensor loops pay per tensor.
for layout in transformer moe; do
  echo "== deltacast-bench kernels ($elements elements, $layout layout)"
  build-gpu/bin/deltacast-bench kernels --elements "$elements" --layout "$layout" --layout-out "$out/layout-$layout.json" \
    --json | tee "$out/kernels-$layout.json"
  echo "== PyTorch baseline on the same model"
  python3 benchmarks/device/torch_baseline.py --layout "$out/layout-$layout.json" | tee "$out/torch-$layout.json"
done
# Versions end to end on GPU tensors: publish() to committed on two consumer processes.
echo "== GPU tensors end to end: publish() to committed on 2 consumer processes (transformer layout)"
PYTHONPATH=build-gpu/python python3 benchmarks/device/gpu_sync_bench.py --layout "$out/layout-transformer.json" \
  | tee "$out/sync-transformer.json"
PYTHONPATH=build-gpu/python python3 benchmarks/device/gpu_sync_bench.py --layout "$out/layout-transformer.json" \
  --shadow host --versions 3 | tee "$out/sync-transformer-host-shadow.json"
# The same through deltacast-bench sync (the RL trace, its processes, the dense baseline per step).
# 2 Gi elements: the trace keeps fp32 master weights and Adam moments, 14 bytes of host memory per element.
echo "== deltacast-bench sync --device cuda (2 Gi elements, 2 consumer processes)"
build-gpu/bin/deltacast-bench sync --device cuda --consumers 2 --elements 2147483648 --versions 3 \
  | tee "$out/sync-bench-cuda.txt"
run_compat || tests_rc=1
echo "== result"
for layout in transformer moe; do
  python3 benchmarks/device/report.py "$out/kernels-$layout.json" "$out/torch-$layout.json"
  echo
done | tee "$out/report.txt"
python3 benchmarks/device/report.py --sync "$out/sync-transformer.json" | tee -a "$out/report.txt"
python3 benchmarks/device/report.py --sync "$out/sync-transformer-host-shadow.json" | tee -a "$out/report.txt"
tail -n 12 "$out/sync-bench-cuda.txt" | tee -a "$out/report.txt"
python3 benchmarks/device/report.py --compat "$out/compat.json" | tee -a "$out/report.txt"
exit "$tests_rc"
