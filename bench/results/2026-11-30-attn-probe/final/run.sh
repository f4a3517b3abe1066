#!/bin/bash
# Session 8, final call (head c66eaaf + raw results): every suite + memcheck + pytest (gpu_check), racecheck/synccheck on the
# attention loops and defaults and the conv tiny input, the attention table twice and the loops against SDPA fp16,
# and the short/long rows' slice sweep.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $S
OUT=/tmp/gc bash $B/bench_py/gpu_check.sh $B > /tmp/check.txt 2>&1
tail -n 22 /tmp/check.txt >> $S
grep -h "^\[  FAILED" /tmp/gc/*.log 2>/dev/null | head >> $S
timeout 120 compute-sanitizer --tool racecheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTable*' > /tmp/rc2.log 2>&1; echo "racecheck attention bulk/wide rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc2.log | tail -1)" >> $S
timeout 90 compute-sanitizer --tool racecheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences:DecodeAttentionCuda.F16LoopFallbacks*' > /tmp/rc3.log 2>&1; echo "racecheck attention default+rule rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc3.log | tail -1)" >> $S
timeout 60 compute-sanitizer --tool synccheck $B/tests/test_attention --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTable*' > /tmp/sc.log 2>&1; echo "synccheck attention bulk/wide rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $S
timeout 60 compute-sanitizer --tool racecheck $B/tests/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput' > /tmp/rc1.log 2>&1; echo "racecheck conv tiny rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc1.log | tail -1)" >> $S
timeout 60 $B/bench/decode_attention --quick --json $OUT/attn.json > $OUT/attn.txt 2>&1; echo "attention bench rc=$?" >> $S
timeout 60 $B/bench/decode_attention --quick --json $OUT/attn2.json > /tmp/attn2.txt 2>&1; echo "attention bench 2 rc=$?" >> $S
timeout 60 python3 $B/bench_py/torch_sdpa.py --ours $OUT/attn.json --out /tmp > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" >> $S
for sh in 1,32,8,128,4096 1,32,8,128,2048 1,32,8,128,131072; do
  timeout 60 $B/bench/decode_attention --shape $sh --sweep 2>&1 | grep -E " ms" | sed -E 's/ +/ /g' | awk -v sh=$sh 'NF>6{for(i=1;i<=NF;i++){if($i ~ /^splits=/) sp=$i; if($(i+1)=="ms") ms=$i}; print sh, sp, ms}' >> $OUT/sweep.txt
done
python3 - <<'PY' > $OUT/second.txt
import json
for r in json.load(open('/tmp/attn2.json'))['rows']:
  print(r['B'], r['L'], r['D'], r['ms'], r['loop'])
PY
grep "^|" $OUT/sdpa.txt | head -9
cat $OUT/second.txt
cat $S
