#!/bin/bash
# Session 7 call 14: merge_slices not inlined (__noinline__).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
for run in 1 2; do
  timeout 60 $B/da_prev --quick --json $OUT/prev$run.json > /dev/null 2>&1
  timeout 60 $B/da_new --quick --json $OUT/new$run.json > /dev/null 2>&1
done
cat $S 2>/dev/null
python3 - <<'PY'
import json, os
O = os.environ['OUT']; n = ['prev1','new1','prev2','new2']
d = {k: json.load(open(f'{O}/{k}.json'))['rows'] for k in n}
print('B L D | ' + ' '.join(n))
for i, r in enumerate(d['prev1']): print(r['B'], r['L'], r['D'], '|', ' '.join(f"{d[k][i]['ms']:.4f}" for k in n))
PY
