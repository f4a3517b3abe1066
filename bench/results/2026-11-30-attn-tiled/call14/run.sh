#!/bin/bash
# Session 15 call 14: the chunk loads in need order (O1, O2) against main (H16).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for P in O1; do timeout 200 /tmp/var/$P/ta > /tmp/test$P.txt 2>&1; echo "test $P rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/test$P.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt; done
for r in 1 2 3; do for P in H16 O1 O2; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p${P}_$r.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
for P in H16 O1; do grep -o "K4/V4 f16 q=f16 splits=auto loop=auto .*out [0-9a-f]*" /tmp/p${P}_1.txt | grep -o "out [0-9a-f]*" | tr '\n' ' ' | sed "s/^/$P hashes: /" >> $OUT/info.txt; echo >> $OUT/info.txt; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt
