#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan, CPU only) in build-fuzz/ and runs each one
# for a bounded time from its seed corpus in fuzz/corpus/<harness>/. Fails on any finding (the
# reproducer is left in build-fuzz/findings/).
#   fuzz/run.sh [seconds per harness, default 30] [harness ...]   (kv spconv mesh)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
harnesses=("${@:-kv spconv mesh}")
read -r -a harnesses <<<"${harnesses[*]}"

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found (Debian: apt-get install clang libclang-rt-dev libomp-dev)"; exit 1; }
done
build=build-fuzz
cmake -S fuzz -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

# One thread per harness (the CPU backend's OpenMP pool would only slow the fuzzing down);
# assimp is not built with the sanitizers, so its own leaks are not ours to report.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1
export LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/findings"
status=0
for h in "${harnesses[@]}"; do
  work="$build/corpus/$h"
  mkdir -p "$work"
  echo "fuzz: $h for ${seconds}s"
  if ! "$build/fuzz_$h" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
      -artifact_prefix="$build/findings/$h-" -print_final_stats=1 "$work" "fuzz/corpus/$h" \
      >"$build/$h.log" 2>&1; then
    echo "fuzz: $h FOUND A PROBLEM (log: $build/$h.log, input: $build/findings/$h-*)"
    tail -40 "$build/$h.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$h.log" | tr '\n' ' '
    echo
  fi
done
exit $status
