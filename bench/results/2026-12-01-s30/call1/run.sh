#!/bin/bash
# s30 call 1: exp-wgskip ac45e08 (code 928f100): watchdog halo tests first, then tests, timing, sanitizers
# (s29's next_run.sh with shorter timeouts; a variant whose tests fail is not timed).
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; X=/tmp/bn/cvar; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
halo="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*"
timeout 45 $X/WD/test_sparse_conv --gtest_filter="$halo" > $OUT/wd.txt 2>&1; rc=$?
echo "watchdog halo tests rc=$rc $(grep -c WATCHDOG $OUT/wd.txt) watchdog lines" | tee $OUT/info.txt
grep -m3 WATCHDOG $OUT/wd.txt | tee -a $OUT/info.txt
[ $rc -eq 0 ] || exit 1
ok="MG"
for v in WS WB; do
  timeout 60 $X/$v/test_sparse_conv > $OUT/test_$v.txt 2>&1; rc=$?
  echo "test $v rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_$v.txt | tr '\n' ' ')" | tee -a $OUT/info.txt
  [ $rc -eq 0 ] && ok="$ok $v"
done
python3 ../../shells.py 1024 512 > /dev/null
for round in 1 2 3; do for R in 1024 512; do for v in $ok; do
  timeout 20 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 --samples 4096 \
    --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "r$round $v R=$R rc=$? $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out 2> /dev/null | cut -c1-12)" | tee -a $OUT/table.txt
done; done; done
case "$ok" in *WB*) for tool in memcheck racecheck synccheck; do
  timeout 70 compute-sanitizer --tool $tool $X/WB/test_sparse_conv --gtest_filter="$halo" > /tmp/s.log 2>&1
  echo "$tool WB rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/s.log | tail -1)" | tee -a $OUT/info.txt
done;; esac
