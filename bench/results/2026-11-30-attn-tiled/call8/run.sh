#!/bin/bash
# Session 15 call 8: E1, E2 (first chunk to L2 at entry), E3 (distance 2) against F15 (main c59fedb)
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/E2/ta > $OUT/testE2.txt 2>&1; echo "test E2 rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testE2.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2 3; do for P in F15 E1 E2 E3; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt
