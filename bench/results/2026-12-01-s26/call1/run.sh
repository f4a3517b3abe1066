#!/bin/bash
# Session 26 call 1: A0 (main) / VP (exp-vpair, FRUGAL_VPAIR_PROBE=1) / MP (exp-merge) decode attention,
# `--quick` three rounds alternating; MP's tests and sanitizers; SDPA fp16 beside MP's table.
# Bundle: bench/build_variant.sh A0; ... VP /work/vpair -- -DFRUGAL_VPAIR_PROBE=1; ... MP /work/merge;
# tar -C .gpu -cJf CALL/bundle.tar.xz cvar/{A0,VP,MP}/{decode_attention,test_attention}
cd "$(dirname "$0")"; H=$(pwd); ROOT=$(cd ../../.. && pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $L
timeout 200 $X/MP/test_attention 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | head -6 >> $L
for r in 1 2 3; do for v in A0 VP MP; do
  extra=""; [ $v = VP ] && extra="--dump /tmp/out_VP"
  timeout 120 $X/$v/decode_attention --quick $extra --json /tmp/q_${v}_$r.json > /tmp/q.txt 2>&1; echo "$v round $r rc=$?" >> $L
  grep -E "^B=" /tmp/q.txt | sed "s/^/$v $r /" >> $OUT/table.txt
done; done

timeout 150 compute-sanitizer --tool memcheck $X/MP/test_attention --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4 >> $L
timeout 100 compute-sanitizer --tool racecheck $X/MP/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace:DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.F16WideTableSmallWrappedSlices' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -4 >> $L
timeout 100 compute-sanitizer --tool synccheck $X/MP/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4 >> $L
python3 $ROOT/bench/torch_sdpa.py --ours /tmp/q_MP_3.json --out $OUT 2>&1 | grep -E "^\|" | head -14 >> $L
cp /tmp/q_A0_3.json /tmp/q_MP_3.json $OUT/ 2>/dev/null
cat $L; cut -c1-175 $OUT/table.txt
