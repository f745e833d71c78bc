#!/usr/bin/env bash
# What the GPU kernels spend their time on, and whether they touch memory they
# should not, on a machine with a CUDA GPU (after `run.sh tests` built
# build-gpu/): Nsight Compute's throughput, occupancy and warp-stall sections
# for one launch of each codec kernel on a 512 Mi-element model (1% changed),
# then compute-sanitizer's memcheck and racecheck over the GPU parity tests.
# Reports go to $OUT (or build-gpu/out): ncu-kernels.txt, sanitizer.txt; a
# summary is printed. About 5 minutes on an H100.
#
# ncu needs a runtime that exposes the hardware counters (Firecracker does,
# gVisor does not: then the step says so and the sanitizer still runs). The
# clocks are left as they are (--clock-control none).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-gpu/out}"
mkdir -p "$out"
bench=build-gpu/bin/deltacast-bench
parity=build-gpu/bin/gpu_parity_test
if [ ! -x "$bench" ] || [ ! -x "$parity" ]; then
  echo "profile.sh: build first (benchmarks/device/run.sh tests)" >&2
  exit 2
fi
if [ -d /tmp/deltacast-deps/usr/lib/x86_64-linux-gnu ]; then
  export LD_LIBRARY_PATH="/tmp/deltacast-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cuda_bin="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
ncu="$(command -v ncu || echo "$cuda_bin/ncu")"
sanitizer="$(command -v compute-sanitizer || echo "$cuda_bin/compute-sanitizer")"
rc=0

echo "== Nsight Compute: one launch of each codec kernel"
# One run of the benchmark per kernel, profiling its second launch (the first is a warm-up).
: >"$out/ncu-kernels.txt"
for kernel in encode_chunks walk_jobs check_groups place_groups apply_version; do
  "$ncu" --clock-control none --kernel-name-base function -k "regex:^$kernel" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    "$bench" kernels --elements 536870912 --layout transformer --reps 1 >>"$out/ncu-kernels.txt" 2>&1 || rc=1
done
grep -E '^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|==PROF==|ERR' \
  "$out/ncu-kernels.txt" | head -n 150

echo "== compute-sanitizer: memcheck and racecheck over the GPU parity tests"
: >"$out/sanitizer.txt"
for tool in memcheck racecheck; do
  # The huge-tensor case is left out: under the sanitizer it would take minutes and says nothing new.
  if ! timeout 300 "$sanitizer" --tool "$tool" --error-exitcode 9 "$parity" \
      --gtest_filter='-GpuApplier.ATensorAboveTwoToTheThirtyTwoElements' >>"$out/sanitizer.txt" 2>&1; then
    echo "compute-sanitizer $tool: FAILED (see $out/sanitizer.txt)"
    rc=1
  else
    echo "compute-sanitizer $tool: clean"
  fi
done
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|PASSED|FAILED' "$out/sanitizer.txt" | head -n 40
exit "$rc"
