#!/bin/bash
# Session 15 call 10: D = 64 at 3 blocks an SM (G64) against main (M17); test + memcheck of main's mixes.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for P in M17 G64; do timeout 200 /tmp/var/$P/ta > /tmp/test$P.txt 2>&1; echo "test $P rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/test$P.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt; done
timeout 150 compute-sanitizer --tool memcheck /tmp/var/M17/ta --gtest_filter='DecodeAttentionCuda.*' > /tmp/mc.txt 2>&1; echo "memcheck M17 attention rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.txt | tail -1)" >> $OUT/info.txt
for r in 1 2 3; do for P in M17 G64; do
  timeout 60 /tmp/var/$P/da --mixes --json /tmp/p$P.json > /tmp/mix_${P}_$r.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
grep -h "out " /tmp/mix_M17_1.txt | cut -c1-75 > $OUT/rows.txt
cat $OUT/info.txt; cat $OUT/rows.txt; cat $OUT/table.txt
