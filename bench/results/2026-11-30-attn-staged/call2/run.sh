#!/bin/bash
# Session 7 call 2: the wide loop with its first chunk staged before the prologue.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/check.txt
timeout 120 $B/tests/test_attention > /tmp/t.log 2>&1; echo "test_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $OUT/check.txt
grep -E "FAILED|staged|Failure" /tmp/t.log | head -20 >> $OUT/check.txt
timeout 90 compute-sanitizer --tool racecheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTableSmall*' > /tmp/rc.log 2>&1; echo "racecheck small rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/check.txt
timeout 90 compute-sanitizer --tool memcheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTableSmall*:DecodeAttentionCuda.F16LoopFallbacks*' > /tmp/mc.log 2>&1; echo "memcheck small+fallbacks rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/check.txt
timeout 90 compute-sanitizer --tool synccheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTableSmall*' > /tmp/sc.log 2>&1; echo "synccheck small rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/check.txt
timeout 100 $B/bench/decode_attention --quick --loops --json $OUT/loops.json > $OUT/loops.txt 2>&1; echo "loops rc=$?" >> $OUT/check.txt
timeout 100 $B/bench/decode_attention --quick --loops --json $OUT/loops2.json > $OUT/loops2.txt 2>&1; echo "loops2 rc=$?" >> $OUT/check.txt
timeout 60 python3 $B/bench_py/torch_sdpa.py --ours $OUT/loops.json --out /tmp > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" >> $OUT/check.txt
cat $OUT/check.txt
grep -E "loop=(wide|staged)" $OUT/loops.txt | awk '{print $1,$5,$2,$4,$10,$11}'
grep "^|" $OUT/sdpa.txt | head -12
