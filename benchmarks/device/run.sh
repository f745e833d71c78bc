#!/usr/bin/env bash
# The GPU check, in one command on a machine with a CUDA GPU: builds with CUDA,
# runs the GPU tests, then the benchmarks the GPU targets are stated in, and
# prints the table. Every step has a time limit inside an overall budget
# (DELTACAST_DEVICE_SECONDS, default unlimited) so that a lease-bounded call
# always ends by itself with its logs written: a step that would start past
# the budget is skipped, saying so.
#
#   run.sh [all|tests|bench|compat|profile|STEP...]
#
# Phases: tests (build, GPU tests, sanitizer, the unit tests on every core),
# bench (kernels and the PyTorch baseline on both layouts, publish -> committed
# end to end with the shadow on the GPU and on the host, checkpoint-engine
# comparison), profile (Nsight Compute of each kernel), all (both, the quick
# steps first: the checkpoint-engine comparison, about 5 minutes, comes last but one).
# Single steps may be named instead: build, gpu, sanitizer, unit, kernels,
# sync, sync-host, compat, sync-bench, profile, trust (what authenticating and encrypting cost
# on loopback with a core per rail end: deltacast-bench wire and sync under each protection).
#
# Output: $OUT (or build-gpu/out) gets log.txt (everything), report.txt (the
# table) and results.tgz (every JSON and log): at most a few files, as a
# lease's file limits want. Without the Debian -dev packages installed, carry
# .deps/ (made by benchmarks/device/fetch-deps.sh): they are unpacked into a
# private prefix; checkpoint-engine's wheels come from .deps/pypi.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root="$(pwd)"
final="${OUT:-build-gpu/out}"
mkdir -p "$final" build-gpu/results
final="$(cd "$final" && pwd)"
res="$root/build-gpu/results"   # kept on a warm machine between calls; packed into $final at the end
elements="${DELTACAST_KERNEL_ELEMENTS:-4294967296}"
budget="${DELTACAST_DEVICE_SECONDS:-1000000}"
started=$(date +%s)
exec > >(tee -a "$final/log.txt") 2>&1
summary=()
overall=0

# step NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, what the budget leaves), records the outcome.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((started + budget - $(date +%s) - 20))
  if ((left < 15)); then
    echo "== $name: skipped (budget spent)"
    summary+=("$name: skipped, budget spent")
    overall=1
    return 1
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit} s) at +$(($(date +%s) - started)) s"
  local t0 rc
  t0=$(date +%s.%N)
  # The step runs in a child bash so that timeout can stop a shell function too.
  timeout -k 10 "$limit" bash -c '"$@"' step "$@"
  rc=$?
  local secs
  secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  local what="ok"
  ((rc == 124 || rc == 137)) && what="TIMED OUT"
  ((rc != 0 && rc != 124 && rc != 137)) && what="FAILED rc=$rc"
  echo "== $name: $what in ${secs} s"
  summary+=("$name: $what (${secs} s)")
  ((rc != 0)) && overall=1
  return "$rc"
}

pack() {
  echo "== summary (card: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1))"
  printf '  %s\n' "${summary[@]}"
  [ -f "$res/report.txt" ] && cp "$res/report.txt" "$final/report.txt"
  tar -czf "$final/results.tgz" -C "$res" . 2>/dev/null
}
trap pack EXIT

use_carried_packages() {
  if [ -d .deps ] && ls .deps/*.deb >/dev/null 2>&1; then
    local prefix=/tmp/deltacast-deps
    if [ ! -d "$prefix/usr" ]; then
      mkdir -p "$prefix"
      for deb in .deps/*.deb; do
        dpkg-deb -x "$deb" "$prefix" 2>/dev/null || (cd "$prefix" && ar p "$root/$deb" data.tar.xz | tar xJ)
      done
    fi
    local arch_lib="$prefix/usr/lib/x86_64-linux-gnu"
    export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$arch_lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$arch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$arch_lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$prefix"
    export PATH="$PATH:$prefix/usr/bin"
    echo "run.sh: the packages of .deps/ unpacked in $prefix"
  fi
  # Config files of older packages name CMake versions that CMake 4 no longer emulates.
  export CMAKE_POLICY_VERSION_MINIMUM=3.5
}

describe_machine() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | head -n 3
  nvcc --version 2>&1 | tail -n 2
  echo "python3: $(command -v python3) $(python3 -V 2>&1); cmake $(cmake --version | head -n1); $(g++ --version | head -n1)"
  echo "cores: $(nproc); ninja: $(command -v ninja || echo none)"
}

build() {
  local python_args=() generator=()
  if pybind11_dir="$(python3 -m pybind11 --cmakedir 2>/dev/null)"; then
    python_args=(-DPython_EXECUTABLE="$(command -v python3)" -Dpybind11_DIR="$pybind11_dir")
  fi
  command -v ninja >/dev/null && [ ! -f build-gpu/CMakeCache.txt ] && generator=(-G Ninja)
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDELTACAST_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${DELTACAST_CUDA_ARCH:-90}" "${python_args[@]}" >"$res/configure.log" 2>&1 ||
    { tail -n 40 "$res/configure.log"; return 1; }
  grep -E "deltacast:" "$res/configure.log"
  cmake --build build-gpu -j"$(nproc)" >"$res/build.log" 2>&1 || { grep -E -B2 -A12 "error|Error" "$res/build.log" | head -n 80; return 1; }
  tail -n 2 "$res/build.log"
}

gpu_tests() {
  # parity and engine side by side (the card has room), then the Python tests (serial).
  (cd build-gpu && ctest --output-on-failure -L gpu -j2 --timeout "${1:-300}") >"$res/ctest-gpu.log" 2>&1
  local rc=$?
  grep -E "Test +#|tests passed|FAILED|Failed|\[  FAILED|passed|failed|Error" "$res/ctest-gpu.log" | head -n 60
  ((rc != 0)) && tail -n 80 "$res/ctest-gpu.log"
  return "$rc"
}

unit_tests() {
  # The unit tests on every core of the GPU machine: races that two cores hide show here. The
  # layout check reads the source tree only (the same anywhere) and needs pytest in the system's
  # python3, which that machine's image lacks: left out.
  (cd build-gpu && ctest -L unit -E '^layout_boundaries$' -j"$(nproc)" --timeout 120 --output-on-failure) \
    >"$res/ctest-unit.log" 2>&1
  local rc=$?
  tail -n 8 "$res/ctest-unit.log"
  ((rc != 0)) && grep -E -A30 "\*\*\*Failed|FAILED" "$res/ctest-unit.log" | head -n 80
  return "$rc"
}

sanitizer() {
  local tool="$1" cuda_bin
  cuda_bin="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
  local sanitizer
  sanitizer="$(command -v compute-sanitizer || echo "$cuda_bin/compute-sanitizer")"
  # The huge-tensor case is left out: under the sanitizer it takes minutes and says nothing new.
  "$sanitizer" --tool "$tool" --error-exitcode 9 build-gpu/bin/gpu_parity_test \
    --gtest_filter='-GpuApplier.ATensorAboveTwoToTheThirtyTwoElements' >"$res/sanitizer-$tool.txt" 2>&1
  local rc=$?
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|PASSED|FAILED|not supported' "$res/sanitizer-$tool.txt" | head -n 20
  return "$rc"
}

kernels() {
  local layout="$1"
  build-gpu/bin/deltacast-bench kernels --elements "$elements" --layout "$layout" \
    --layout-out "$res/layout-$layout.json" --json >"$res/kernels-$layout.json" || return 1
  python3 benchmarks/device/torch_baseline.py --layout "$res/layout-$layout.json" >"$res/torch-$layout.json" || return 1
  python3 benchmarks/device/report.py "$res/kernels-$layout.json" "$res/torch-$layout.json" | tee -a "$res/report.txt"
}

sync_python() {
  local name="$1"
  shift
  PYTHONPATH=build-gpu/python python3 benchmarks/device/gpu_sync_bench.py --layout "$res/layout-transformer.json" "$@" \
    >"$res/$name.json" || return 1
  python3 benchmarks/device/report.py --sync "$res/$name.json" | tee -a "$res/report.txt"
}

compat() {
  local site_args=()
  if ls .deps/pypi/*.whl >/dev/null 2>&1; then
    rm -rf /tmp/ce-site
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ce-site .deps/pypi/*.whl &&
      site_args=(--site /tmp/ce-site)
  fi
  PYTHONPATH=build-gpu/python python3 benchmarks/device/compat_bench.py "${site_args[@]}" >"$res/compat.json" || return 1
  python3 benchmarks/device/report.py --compat "$res/compat.json" | tee -a "$res/report.txt"
}

sync_bench() {
  # The RL trace through deltacast-bench sync; 2 Gi elements: the trace keeps fp32 master weights
  # and Adam moments, 14 bytes of host memory per element.
  build-gpu/bin/deltacast-bench sync --device cuda --consumers 2 --elements 2147483648 --versions 3 \
    >"$res/sync-bench-cuda.txt" 2>&1 || { tail -n 20 "$res/sync-bench-cuda.txt"; return 1; }
  tail -n 12 "$res/sync-bench-cuda.txt" | tee -a "$res/report.txt"
}

trust_cost() {
  # What authenticating and encrypting cost on loopback when each rail's sender and receiver have
  # cores of their own (on two cores the passes over the bytes queue behind one another), with
  # each rail end's payload work inline and on its helper thread (wire --piece-helpers), and each
  # sealed transfer under both AES-GCM libraries (wire --aes-gcm), and each authenticated one with
  # its payload's leaf tags made once and with each rail tagging it (wire --leaf-tags).
  python3 benchmarks/wire/trust_cost.py build-gpu/bin/deltacast-bench --rounds 5 --piece-helpers compare \
    --aes-gcm compare --leaf-tags compare --json "$res/trust-cost.json" >"$res/trust-cost.txt" 2>&1 \
    || { tail -n 20 "$res/trust-cost.txt"; return 1; }
  tail -n 16 "$res/trust-cost.txt" | tee -a "$res/report.txt"
}

run_step() {
  case "$1" in
    build) step build 420 build ;;
    gpu) step gpu-tests 420 gpu_tests 300 ;;
    sanitizer) step memcheck 180 sanitizer memcheck; step racecheck 180 sanitizer racecheck ;;
    unit) step unit-tests-all-cores 180 unit_tests ;;
    kernels) step kernels-transformer 240 kernels transformer; step kernels-moe 240 kernels moe ;;
    sync) step sync-gpu-shadow 300 sync_python sync-transformer ;;
    sync-host) step sync-host-shadow 300 sync_python sync-transformer-host-shadow --shadow host --versions 3 ;;
    compat) step compat 420 compat ;;
    sync-bench) step deltacast-bench-sync 420 sync_bench ;;
    profile) OUT="$res" step profile 420 bash benchmarks/device/profile.sh ;;
    trust) step trust-cost 360 trust_cost ;;
    *) echo "run.sh: unknown step '$1'"; overall=2 ;;
  esac
}

describe_machine
use_carried_packages
export root res elements
export -f build gpu_tests unit_tests sanitizer kernels sync_python compat sync_bench trust_cost
phases=("${@:-all}")
for phase in "${phases[@]}"; do
  case "$phase" in
    tests) steps=(build gpu sanitizer unit) ;;
    bench) steps=(build kernels sync sync-host compat sync-bench) ;;
    all) steps=(build gpu sanitizer kernels sync sync-host unit compat sync-bench) ;;
    *) steps=("$phase") ;;
  esac
  for s in "${steps[@]}"; do
    run_step "$s"
    # Nothing runs on a tree that did not build.
    [ "$s" = build ] && [[ "${summary[-1]}" != "build: ok"* ]] && exit 1
  done
done
exit "$overall"
