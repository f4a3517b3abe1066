#!/bin/bash
# Session 15 call 11: the wide loop at 6 warps a block (W6) against main (M17).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/W6/ta > /tmp/testW6.txt 2>&1; echo "test W6 rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/testW6.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2 3; do for P in M17 W6; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K | fixed D128 | fixed D256"; cat $OUT/table.txt
