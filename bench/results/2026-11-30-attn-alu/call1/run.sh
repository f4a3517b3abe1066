#!/bin/bash
# Session 9 call 1: ALU decode variants (A..F) against the table build (T).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 150 /tmp/var/F/ta > $OUT/testF.txt 2>&1; echo "test F rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testF.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
timeout 150 /tmp/var/A/ta --gtest_filter='*F16*:*Wide*:*Bulk*' > $OUT/testA.txt 2>&1; echo "test A rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testA.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2; do for P in T A B C D E F; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
for P in T A C F; do timeout 100 /tmp/var/$P/da > $OUT/full_$P.txt 2>&1; done
for P in A C F; do diff <(grep -o "out [0-9a-f]*" $OUT/full_T.txt) <(grep -o "out [0-9a-f]*" $OUT/full_$P.txt) > /dev/null && echo "$P hashes: all equal ($(grep -c 'out ' $OUT/full_$P.txt) rows)" >> $OUT/info.txt || echo "$P hashes DIFFER" >> $OUT/info.txt; done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt
