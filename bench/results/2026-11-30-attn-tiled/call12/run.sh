#!/bin/bash
# Session 15 call 12: main's head (45145ea): test_attention, racecheck + synccheck over the f16 path's every bit width and D, --mixes once.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/H16/ta > $OUT/test.txt 2>&1; echo "test_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
timeout 250 compute-sanitizer --tool racecheck /tmp/var/H16/ta --gtest_filter='DecodeAttentionCuda.F16TensorCorePathMatchesTheOracle' > /tmp/rc.txt 2>&1; echo "racecheck f16 path (all D, all bit widths) rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/rc.txt | tr '\n' ' ')" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool synccheck /tmp/var/H16/ta --gtest_filter='DecodeAttentionCuda.F16TensorCorePathMatchesTheOracle' > /tmp/sc.txt 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.txt | tail -1)" >> $OUT/info.txt
timeout 60 /tmp/var/H16/da --mixes > $OUT/mixes.txt 2>&1
cat $OUT/info.txt; cut -c1-110 $OUT/mixes.txt | grep "out "
