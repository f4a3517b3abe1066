#!/bin/bash
# Session 10: the bulk ring removed. test_attention, memcheck / racecheck / synccheck of the wide-loop tests, the quick table (hashes).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp; B=/tmp/rmb; S=$OUT/check.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $S
timeout 120 $B/test_attention > $OUT/test.txt 2>&1; echo "test_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | tr '\n' ' ')" >> $S
grep -E "^\[  FAILED" $OUT/test.txt | head >> $S
F='DecodeAttentionCuda.F16WideTable*:DecodeAttentionCuda.F16LoopFallbacks*:DecodeAttentionCuda.F16MergeInTheLastBlock*'
timeout 120 compute-sanitizer --tool memcheck $B/test_attention --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $S
timeout 120 compute-sanitizer --tool racecheck $B/test_attention --gtest_filter='DecodeAttentionCuda.F16WideTableSmallWrappedSlices:DecodeAttentionCuda.F16MergeInTheLastBlock*' > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $S
timeout 60 compute-sanitizer --tool synccheck $B/test_attention --gtest_filter='DecodeAttentionCuda.F16WideTableSmallWrappedSlices' > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $S
timeout 60 $B/decode_attention --quick > $OUT/attn.txt 2>&1; echo "attention bench rc=$?" >> $S
cat $OUT/attn.txt | tail -8
cat $S
