#!/bin/bash
# Session 7 call 8: the slice sweep of the short and medium rows with the wide loop (head: carveout).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
for sh in 1,32,8,128,4096 1,32,8,128,8192 8,32,8,128,4096 1,32,8,128,16384 2,32,8,128,4096 1,32,8,128,2048 1,32,8,128,131072 8,32,8,128,32768; do
  timeout 60 $B/decode_attention --shape $sh --sweep > /tmp/s.txt 2>&1
  grep -E " ms" /tmp/s.txt | sed -E 's/ +/ /g' | awk -v sh=$sh '{for(i=1;i<=NF;i++){if($i ~ /^splits=/) sp=$i; if($(i+1)=="ms") ms=$i}; print sh, sp, ms}' >> $OUT/sweep.txt
done
python3 - <<'PY'
import os, collections
d = collections.defaultdict(list)
for l in open(os.environ['OUT'] + '/sweep.txt'):
  sh, sp, ms = l.split(); d[sh].append((sp.split('=')[1], float(ms)))
for sh, v in d.items():
  best = min(v, key=lambda x: x[1])
  print(sh, 'auto', [m for s, m in v if s == 'auto'], 'best', best, ' '.join(f'{s}:{m:.4f}' for s, m in v))
PY
