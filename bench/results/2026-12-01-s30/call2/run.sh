#!/bin/bash
# s30 call 2: the timing call 1 missed (its shells.py path was wrong), and synccheck's messages on the halo
# tests for MG and WB (call 1: WB 9,468 errors, the log not kept), racecheck on WB with a longer limit.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
../../../conv_ab.sh bundle.tar.xz --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" MG WS WB > $OUT/ab.txt 2>&1
X=/tmp/conv_ab_bundle/cvar halo="SpconvCudaWgmma.HaloKernel*"
for v in MG WB; do
  timeout 60 compute-sanitizer --tool synccheck $X/$v/test_sparse_conv --gtest_filter="$halo" > /tmp/sc_$v.log 2>&1
  echo "synccheck $v rc=$? $(grep 'ERROR SUMMARY' /tmp/sc_$v.log | tail -1)" | tee -a $OUT/info2.txt
  head -60 /tmp/sc_$v.log > $OUT/synccheck_$v.head
done
timeout 170 compute-sanitizer --tool racecheck $X/WB/test_sparse_conv --gtest_filter="$halo" > /tmp/rc.log 2>&1
echo "racecheck WB rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" | tee -a $OUT/info2.txt
head -40 /tmp/rc.log > $OUT/racecheck_WB.head
cat $OUT/ab.txt | tail -20
