#!/bin/bash
# For the next session: the first device call for exp-wgskip 928f100 (head ac45e08 adds comments only; not run in s29). Build here first:
#   TARGETS=test_sparse_conv bench/build_variant.sh WD /work/wgskip -- -DFRUGAL_EXP_WATCHDOG
#   TARGETS="spconv test_sparse_conv" bench/build_variant.sh WS /work/wgskip
#   TARGETS="spconv test_sparse_conv" bench/build_variant.sh WB /work/wgskip -- -DFRUGAL_EXP_WGKEY
#   tar -C .gpu -cJf <call>/bundle.tar.xz cvar/MG cvar/WD cvar/WS cvar/WB   (MG: main's build; carry the bundle)
# Then: the watchdog's halo tests (45 s; any "WATCHDOG" line names the stuck barrier: full_s at +0x0,
# empty_s at +0x20 of the barrier block, see call 8), and only if they pass, the tests, the timing (short
# timeouts) and the sanitizers.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; X=/tmp/bn/cvar; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
halo="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*"
timeout 45 $X/WD/test_sparse_conv --gtest_filter="$halo" > $OUT/wd.txt 2>&1; rc=$?
echo "watchdog halo tests rc=$rc $(grep -c WATCHDOG $OUT/wd.txt) watchdog lines" | tee $OUT/info.txt
grep -m3 WATCHDOG $OUT/wd.txt | tee -a $OUT/info.txt
[ $rc -eq 0 ] || exit 1
for v in WS WB; do
  timeout 60 $X/$v/test_sparse_conv > /tmp/t_$v.txt 2>&1
  echo "test $v rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t_$v.txt | tr '\n' ' ')" | tee -a $OUT/info.txt
done
python3 ../../shells.py 1024 512 > /dev/null
for round in 1 2 3; do for R in 1024 512; do for v in MG WS WB; do
  timeout 30 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 --samples 4096 \
    --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "$v R=$R rc=$? $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out 2> /dev/null | cut -c1-12)" | tee -a $OUT/table.txt
done; done; done
for tool in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool $X/WB/test_sparse_conv --gtest_filter="$halo" > /tmp/s.log 2>&1
  echo "$tool WB rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/s.log | tail -1)" | tee -a $OUT/info.txt
done
