#!/bin/bash
# Session 15 call 9: the 8-bit mixes at D = 128: main (M16) against one tile a chunk (Q1) and 3 blocks an SM (Q2).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for P in Q1 Q2; do timeout 200 /tmp/var/$P/ta > $OUT/test$P.txt 2>&1; echo "test $P rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test$P.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt; done
for r in 1 2 3; do for P in M16 Q1 Q2; do
  timeout 60 /tmp/var/$P/da --mixes --json /tmp/p$P.json > $OUT/mix_${P}_$r.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
cat $OUT/info.txt; echo "rows: B8L32K K8V4 K4V8 K8V8 | B1L128K K8V4 K4V8 K8V8 | B1L4K K8V4 K4V8 K8V8"; cat $OUT/table.txt; grep -h "out " $OUT/mix_M16_1.txt | cut -c1-110
