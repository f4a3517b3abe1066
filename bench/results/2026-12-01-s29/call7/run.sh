#!/bin/bash
# Session 29 call 7: the per-warpgroup offset skip with the deadlock mended (exp-wgskip 9b50aa7): WS / WB
# against MG. Short timeouts (a hang must not eat the session's device time): WS's tests first and nothing
# else if they fail; then C = 64 at R = 1024 and 512, two rounds; then memcheck and racecheck on WS's halo tests.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; X=/tmp/b7/cvar; mkdir -p /tmp/b7 && tar -xJf bundle.tar.xz -C /tmp/b7
timeout 60 $X/WS/test_sparse_conv > /tmp/t.txt 2>&1; rc=$?
echo "test WS rc=$rc $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.txt | tr '\n' ' ')" | tee $OUT/info.txt
grep -E 'FAILED|Failure' -A3 /tmp/t.txt | head -20 | tee -a $OUT/info.txt
[ $rc -eq 0 ] || exit 1
python3 ../../../shells.py 1024 512 > /dev/null
for round in 1 2; do for R in 1024 512; do for v in MG WS WB; do
  timeout 30 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 --samples 4096 \
    --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err; rc=$?
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$v R=$R rc=$rc $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out 2> /dev/null | cut -c1-12)" | tee -a $OUT/table.txt
done; done; done
halo="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*"
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool $X/WS/test_sparse_conv --gtest_filter="$halo" > /tmp/s.log 2>&1
  echo "$tool WS rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/s.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/s.log | tr '\n' ' ')" | tee -a $OUT/info.txt
done
