#!/bin/bash
# Session 29 call 9: the per-warpgroup offset skip with the deadlock and the parity aliasing mended
# (exp-wgskip 5c1262e): WS / WB against MG. Short timeouts (a hang must not eat the session's device time):
# both builds' tests first, nothing else if WS's fail; then C = 64 at R = 1024 and 512, two rounds; then
# memcheck and racecheck on WB's halo tests.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; X=/tmp/b9/cvar; mkdir -p /tmp/b9 && tar -xJf bundle.tar.xz -C /tmp/b9
timeout 60 $X/WS/test_sparse_conv > /tmp/t.txt 2>&1; rc=$?; timeout 60 $X/WB/test_sparse_conv > /tmp/t2.txt 2>&1; rc2=$?
echo "test WS rc=$rc $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.txt | tr '\n' ' ')" | tee $OUT/info.txt
echo "test WB rc=$rc2 $(grep -E "^\[  (PASSED|FAILED)" /tmp/t2.txt | tr "\n" " ")" | tee -a $OUT/info.txt
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
  timeout 90 compute-sanitizer --tool $tool $X/WB/test_sparse_conv --gtest_filter="$halo" > /tmp/s.log 2>&1
  echo "$tool WB rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/s.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/s.log | tr '\n' ' ')" | tee -a $OUT/info.txt
done
