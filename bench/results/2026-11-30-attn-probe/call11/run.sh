#!/bin/bash
# Session 8 call 11: chunk maxima reduced only when they move (M) vs the committed build (T).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/taM > $OUT/testM.txt 2>&1; echo "test M rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testM.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
timeout 200 compute-sanitizer --tool racecheck /tmp/taM --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTable*' > /tmp/rc.log 2>&1; echo "racecheck M rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
for P in T M T M; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1; echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print(P, r['B'], r['L'], r['D'], r['ms'])
PY
done
timeout 100 /tmp/daM > $OUT/full_M.txt 2>&1; echo "full M rc=$?" >> $OUT/info.txt
timeout 100 /tmp/daT > $OUT/full_T.txt 2>&1; echo "full T rc=$?" >> $OUT/info.txt
diff <(grep -o "out [0-9a-f]*" $OUT/full_T.txt) <(grep -o "out [0-9a-f]*" $OUT/full_M.txt) > /dev/null && echo "output hashes: all equal ($(grep -c 'out ' $OUT/full_M.txt) rows)" >> $OUT/info.txt || echo "output hashes DIFFER" >> $OUT/info.txt
cat $OUT/info.txt; cat $OUT/table.txt
