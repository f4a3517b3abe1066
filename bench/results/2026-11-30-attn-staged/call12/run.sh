#!/bin/bash
# Session 7 call 12: the slice sweep of the register loop's rows (D = 256).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
for sh in 1,32,8,256,4096 1,32,8,256,16384 1,32,8,256,131072 8,32,8,256,32768 8,32,8,256,4096; do
  timeout 60 $B/decode_attention --shape $sh --sweep 2>&1 | grep -E " ms" | sed -E 's/ +/ /g' | awk -v sh=$sh 'NF>6{for(i=1;i<=NF;i++){if($i ~ /^splits=/) sp=$i; if($(i+1)=="ms") ms=$i}; print sh, sp, ms}' >> $OUT/sweep.txt
done
awk 'NF==3' $OUT/sweep.txt | python3 -c "
import sys, collections
d = collections.defaultdict(list)
for l in sys.stdin:
  sh, sp, ms = l.split(); d[sh].append((sp.split('=')[1], float(ms)))
for sh, v in d.items():
  best = min(v, key=lambda x: x[1]); print(sh, 'auto', [m for s, m in v if s == 'auto'], 'best', best); print('   ', ' '.join(f'{s}:{m:.4f}' for s, m in v))
"
