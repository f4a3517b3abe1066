#!/bin/bash
# The checks of this tree on a GPU machine, for one device call: build (sm_90a, tests, benches, the
# Python module), every test binary, compute-sanitizer on the CUDA cases, pytest; one table last.
#
#   bench/device_check.sh [build] [tests] [memcheck] [racecheck] [pytest]   (default: all of them)
#
# BUILD (default /tmp/frugal-gpu) is the build tree; OUT (the device tool's) receives the logs.
# The sanitizers run the parity harness's CUDA cases (every kernel variant on small inputs), the
# corpus-driven hostile-input suite and the CUDA suites' small cases (SANITIZE_FILTER_<test>).
set -u
OUT=${OUT:-/tmp/out}; B=${BUILD:-/tmp/frugal-gpu}; mkdir -p "$OUT"; T0=$(date +%s)
stages=${*:-build tests memcheck racecheck pytest}
el() { echo $(($(date +%s) - T0)); }
rows=()
row() { rows+=("| $1 | $2 | $3 | $(el)s |"); }
gtest_result() { echo "$(grep -E '^\[  PASSED' "$1" | head -1) $(grep -cE '^\[  SKIPPED \] [A-Z]' "$1") skipped, $(grep -cE '^\[  FAILED  \] [A-Z]' "$1") failed"; }
test_bins() { find "$B/tests" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader

for stage in $stages; do
  case $stage in
  build)
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA_ARCHS=${ARCHS:-90a} -DFRUGAL_TOOLS=OFF \
      > "$OUT/build.log" 2>&1 && ninja -C "$B" >> "$OUT/build.log" 2>&1
    rc=$?
    row build "rc=$rc" "$(grep -cE 'error' "$OUT/build.log") error lines"
    [ $rc -ne 0 ] && { grep -E 'error' -m 20 "$OUT/build.log"; break; } ;;
  tests)
    for t in $(test_bins); do
      n=$(basename "$t")
      timeout 400 "$t" > "$OUT/$n.log" 2>&1
      row "$n" "rc=$?" "$(gtest_result "$OUT/$n.log")"
      grep -E '^\[  FAILED  \] [A-Z]' "$OUT/$n.log" | head -8
    done ;;
  memcheck | racecheck)
    for spec in "test_parity:*cuda*" "test_hostile:CorpusOnCuda.*:NonFinite.*:Refusals.*" \
                "test_kv_cache:${SANITIZE_KV:-KvCacheCuda.DecodeStepsWrapTheRing:KvCacheCuda.TensorCoreAppendMatchesCpu}" \
                "test_attention:${SANITIZE_ATTN:-DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.NonFinite*}" \
                "test_sparse_conv:${SANITIZE_CONV:-SpconvCuda.EveryKernelOnATinyInput:SpconvCuda.MapIsIdenticalToTheCpuMap}" \
                "test_spconv_backward:${SANITIZE_BACKWARD:-SpconvBackwardCuda.EveryVariantOnATinyInput}"; do
      n=${spec%%:*} f=${spec#*:}
      [ -x "$B/tests/$n" ] || continue
      timeout ${SAN_TIMEOUT:-300} compute-sanitizer --tool $stage --error-exitcode 9 "$B/tests/$n" --gtest_filter="$f" \
        > "$OUT/$stage-$n.log" 2>&1
      rc=$?
      row "$stage $n" "rc=$rc" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$stage-$n.log" | tail -1); $(gtest_result "$OUT/$stage-$n.log")"
    done ;;
  pytest)
    export PYTHONPATH="$B/python"
    timeout 400 python3 -m pytest -q -rf -p no:cacheprovider python/tests > "$OUT/pytest.log" 2>&1
    row "pytest (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))" "rc=$?" "$(tail -1 "$OUT/pytest.log")"
    grep -E '^FAILED' "$OUT/pytest.log" | head -10 ;;
  esac
done
echo; echo "| check | status | result | t |"; echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
