#!/bin/bash
# Session 8 call 2: the rotating pipeline on the wide loop (R1), + q fragments from smem (R2), against main (da0).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for T in R1 R2; do timeout 200 /tmp/ta$T > $OUT/test$T.txt 2>&1; echo "test $T rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test$T.txt | head -3 | tr '\n' ' ')" >> $OUT/info.txt; done
for P in 0 R1 R2 0 R1 R2; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1; echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print(P, r['B'], r['L'], r['D'], r['ms'], r.get('loop'), r.get('out',''))
PY
done
cat $OUT/info.txt; cat $OUT/table.txt
