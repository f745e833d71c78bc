#!/usr/bin/env bash
# Builds the tree with clang, AddressSanitizer and UBSan into build-fuzz/, runs
# the unit tests there (the whole engine over the fake backend included), then
# fuzzes the bucket decoder for SECONDS (default 60), and the control-message
# decoder, the trust handshake and sealed frames, and a TCP data rail's receiver
# (frames from a holder of the secret) for half as long each, each from a
# freshly generated seed corpus. Any
# sanitizer report or crash fails. `scripts/fuzz.sh --build-only` builds and stops there
# (scripts/test.sh builds while the vLLM environment downloads, and runs the rest at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
seconds="${1:-60}"
# Line tables are all a sanitizer report needs of the debug information, and compile faster than full -g;
# the libraries compile in unity batches, at -O1 (what AddressSanitizer's docs suggest): from scratch
# on 2 cores 8.3 min before, 6.2 with unity batches at -O2, 4.1 at -O1.
generator=()
if [ ! -f build-fuzz/CMakeCache.txt ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz "${generator[@]}" -DDELTACAST_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_decoder make_seed_corpus fuzz_control make_control_corpus fuzz_trust make_trust_corpus fuzz_rail make_rail_corpus \
  core_tests sparse_tests broadcast_tests
if [ "$build_only" = 1 ]; then exit 0; fi
corpus="$(mktemp -d)"
# Transport code parses untrusted frames: its tests run under the sanitizers too (the throughput
# comparison is left to the plain build, where timing means something). They wait on timers for a
# third of their 105 s (2 cores), so they run beside the other unit tests and the fuzzing, their
# report printed once all of that is done.
echo "== unit tests under ASan + UBSan (the transport's beside the rest and the fuzzing)"
build-fuzz/bin/broadcast_tests --gtest_brief=1 --gtest_filter=-Sprayer.SharesFollowBandwidthAndBeatRoundRobin \
  >"$corpus/broadcast_tests.log" 2>&1 &
broadcast_pid=$!
trap 'kill "$broadcast_pid" 2>/dev/null || true; rm -rf "$corpus"' EXIT
build-fuzz/bin/core_tests --gtest_brief=1
# The >2^31-element test needs 4 GiB of tensors; under ASan it only repeats what the plain build checks.
build-fuzz/bin/sparse_tests --gtest_brief=1 --gtest_filter=-HugeTensor.*
summary() { grep -E "^#[0-9]+[[:space:]]+(DONE|pulse)|ERROR|SUMMARY|stat::number_of_executed_units"; }
echo "== fuzzing the bucket decoder for ${seconds}s"
mkdir "$corpus/buckets" "$corpus/control" "$corpus/trust" "$corpus/rail"
build-fuzz/bin/make_seed_corpus "$corpus/buckets"
build-fuzz/bin/fuzz_decoder "$corpus/buckets" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/ 2>&1 | summary
echo "== fuzzing the control-message decoder for $((seconds / 2))s"
build-fuzz/bin/make_control_corpus "$corpus/control"
build-fuzz/bin/fuzz_control "$corpus/control" -max_total_time="$((seconds / 2))" -max_len=8192 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/control- 2>&1 | summary
echo "== fuzzing the trust handshake and sealed frames for $((seconds / 2))s"
build-fuzz/bin/make_trust_corpus "$corpus/trust"
build-fuzz/bin/fuzz_trust "$corpus/trust" -max_total_time="$((seconds / 2))" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/trust- 2>&1 | summary
echo "== fuzzing a TCP data rail's receiver (sealed frames from a holder of the secret) for $((seconds / 2))s"
build-fuzz/bin/make_rail_corpus "$corpus/rail"
build-fuzz/bin/fuzz_rail "$corpus/rail" -max_total_time="$((seconds / 2))" -max_len=4096 -timeout=60 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/rail- 2>&1 | summary
echo "== the transport's unit tests under ASan + UBSan"
broadcast_rc=0
wait "$broadcast_pid" || broadcast_rc=$?
if [ "$broadcast_rc" != 0 ]; then
  cat "$corpus/broadcast_tests.log"
  echo "broadcast_tests under the sanitizers failed (exit $broadcast_rc)"
  exit "$broadcast_rc"
fi
tail -n 5 "$corpus/broadcast_tests.log"
