#!/bin/bash
# Session 7 call 5: the wide loop with an L1 prefetch of each warp's next chunk; shared-memory carveout 100 (max) vs 72 (164 KB: L1 92 KB).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
timeout 120 $B/ta_pf > /tmp/t.log 2>&1; echo "test_attention (prefetch) rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $S
FRUGAL_CARVEOUT=72 timeout 120 $B/ta_pf --gtest_filter='DecodeAttentionCuda.F16*:DecodeAttentionCuda.Ring*' > /tmp/t2.log 2>&1; echo "test_attention F16*/Ring* carveout 72 rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t2.log | tr '\n' ' ')" >> $S
FRUGAL_CARVEOUT=72 timeout 90 compute-sanitizer --tool memcheck $B/ta_pf --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTableSmall*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences:DecodeAttentionCuda.F16LoopFallbacks*' > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $S
for run in 1 2; do
timeout 60 $B/da_old --quick --json $OUT/old$run.json > /tmp/old$run.txt 2>&1; echo "old $run rc=$?" >> $S
FRUGAL_CARVEOUT=100 timeout 60 $B/da_pf --quick --json $OUT/pf100_$run.json > /tmp/pf100_$run.txt 2>&1; echo "pf100 $run rc=$?" >> $S
FRUGAL_CARVEOUT=72 timeout 60 $B/da_pf --quick --json $OUT/pf72_$run.json > /tmp/pf72_$run.txt 2>&1; echo "pf72 $run rc=$?" >> $S
FRUGAL_CARVEOUT=72 timeout 60 $B/da_nopf --quick --json $OUT/nopf72_$run.json > /tmp/nopf72_$run.txt 2>&1; echo "nopf72 $run rc=$?" >> $S
done
timeout 60 python3 $B/torch_sdpa.py --ours $OUT/pf72_1.json --out /tmp > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" >> $S
cat $S
python3 - <<'PY'
import json, os
O = os.environ['OUT']
names = ['old1','old2','pf100_1','pf100_2','pf72_1','pf72_2','nopf72_1','nopf72_2']
data = {n: json.load(open(f'{O}/{n}.json'))['rows'] for n in names}
print('B L D | ' + ' '.join(names))
for i, r in enumerate(data['old1']):
  print(r['B'], r['L'], r['D'], '|', ' '.join(f"{data[n][i]['ms']:.4f}" for n in names))
PY
grep "^|" $OUT/sdpa.txt | head -9
