#!/bin/bash
# Session 8 call 1: probe builds of the wide loop (0 main, 1 loads only, 2 math only), --quick each, main twice.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for P in 0 1 2 0; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > $OUT/p$P.txt 2>&1; echo "P$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print('P'+P, r['B'], r['L'], r['D'], r['ms'], r.get('loop'))
PY
done
cat $OUT/info.txt; cat $OUT/table.txt
