#!/usr/bin/env bash
# What the GPU kernels spend their time on, on a machine with a CUDA GPU (after
# `run.sh tests` built build-gpu/): Nsight Compute's throughput, occupancy and
# warp-stall sections for one launch of each codec kernel on a 512 Mi-element
# model (1% changed). Reports go to $OUT (or build-gpu/out): ncu-kernels.txt; a
# summary is printed. About a minute on an H200. (compute-sanitizer's memcheck
# and racecheck over the GPU parity tests are run.sh's `sanitizer` step.)
#
# ncu needs a runtime that exposes the hardware counters (Firecracker does,
# gVisor does not). The clocks are left as they are (--clock-control none).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out="${OUT:-build-gpu/out}"
mkdir -p "$out"
bench=build-gpu/bin/deltacast-bench
if [ ! -x "$bench" ]; then
  echo "profile.sh: build first (benchmarks/device/run.sh tests)" >&2
  exit 2
fi
if [ -d /tmp/deltacast-deps/usr/lib/x86_64-linux-gnu ]; then
  export LD_LIBRARY_PATH="/tmp/deltacast-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cuda_bin="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
ncu="$(command -v ncu || echo "$cuda_bin/ncu")"
rc=0

echo "== Nsight Compute: one launch of each codec kernel"
# One run of the benchmark per kernel, profiling its second launch (the first is a warm-up).
: >"$out/ncu-kernels.txt"
for kernel in encode_chunks walk_jobs check_groups place_groups apply_kept_version apply_version; do
  "$ncu" --clock-control none --kernel-name-base function -k "regex:^$kernel" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    "$bench" kernels --elements 536870912 --layout transformer --reps 1 >>"$out/ncu-kernels.txt" 2>&1 || rc=1
done
grep -E '^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|==PROF==|ERR' \
  "$out/ncu-kernels.txt" | head -n 150

exit "$rc"
