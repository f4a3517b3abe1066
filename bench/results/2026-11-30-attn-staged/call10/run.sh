#!/bin/bash
# Session 7 call 10: the last block's slice merge split over two warps a row where warps are spare.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
timeout 120 $B/test_attention > /tmp/t.log 2>&1; echo "test_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $S
timeout 90 compute-sanitizer --tool racecheck $B/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences:DecodeAttentionCuda.F16BulkRingAndWideTableSmall*' > /tmp/rc.log 2>&1; echo "racecheck merge/ring/small rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $S
timeout 90 compute-sanitizer --tool memcheck $B/test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences:DecodeAttentionCuda.ForcedSplitsAndWorkspace' > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $S
for run in 1 2; do
  timeout 60 $B/da_prev --quick --json $OUT/prev$run.json > /dev/null 2>&1
  timeout 60 $B/da_new --quick --json $OUT/new$run.json > /dev/null 2>&1
done
cat $S
python3 - <<'PY'
import json, os
O = os.environ['OUT']; n = ['prev1','new1','prev2','new2']
d = {k: json.load(open(f'{O}/{k}.json'))['rows'] for k in n}
print('B L D | ' + ' '.join(n))
for i, r in enumerate(d['prev1']): print(r['B'], r['L'], r['D'], '|', ' '.join(f"{d[k][i]['ms']:.4f}" for k in n))
PY
