#!/bin/bash
# Session 15 call 7: N1, N2, PF1c (4-byte spills) against M3
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/N1/ta > $OUT/testN1.txt 2>&1; echo "test N1 rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testN1.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2 3; do for P in M3 N1 N2 PF1c; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt
