#!/bin/bash
# Session 15 call 5: M4 tests + sanitizers; M4, D2, D3 against M3.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/var/M4/ta > $OUT/testM4.txt 2>&1; echo "test M4 rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testM4.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
for r in 1 2 3; do for P in M3 M4 D2 D3; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
F='DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.ForcedSplitsAndWorkspace:DecodeAttentionCuda.F16PathGqa*:DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.F16WideTable*'
timeout 150 compute-sanitizer --tool memcheck /tmp/var/M4/ta --gtest_filter="$F" > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)" >> $OUT/info.txt
timeout 150 compute-sanitizer --tool racecheck /tmp/var/M4/ta --gtest_filter='DecodeAttentionCuda.F16WideTable*:DecodeAttentionCuda.F16PathGqa*' > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck.txt | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt
