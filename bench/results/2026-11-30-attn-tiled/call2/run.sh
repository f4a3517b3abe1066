#!/bin/bash
# Session 15 call 2: K in token order + P shuffled (KP) against main (T0) and the probe PK.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/KP/ta > $OUT/testKP.txt 2>&1; echo "test KP rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testKP.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2 3; do for P in T0 KP PK; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
for r in 1 2; do for P in T0 KP; do for S in 8,32,8,64,32768 1,32,8,64,131072; do
  echo "$P $S $(timeout 60 /tmp/var/$P/da --shape $S 2>&1 | grep -E 'K4/V4 f16 q=f16 splits=auto' | head -1 | grep -o '[0-9.]* ms')" >> $OUT/d64.txt
done; done; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt; cat $OUT/d64.txt
