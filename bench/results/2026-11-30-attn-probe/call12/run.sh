#!/bin/bash
# Session 8 call 12: the slice merge through shared memory (C) vs HEAD before it (M); sanitizers; SDPA table.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 100 /tmp/taC > $OUT/testC.txt 2>&1; echo "test_attention C rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testC.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
timeout 100 /tmp/tk > $OUT/test_kv.txt 2>&1; echo "test_kv_cache rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_kv.txt | head -3 | tr '\n' ' ')" >> $OUT/info.txt
F='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.RingWrapMixedLengthsAndEmptySequences:DecodeAttentionCuda.F16BulkRingAndWideTableSmallWrappedSlices*'
timeout 120 compute-sanitizer --tool memcheck /tmp/taC --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck C rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck /tmp/taC --gtest_filter="$F" > /tmp/rc.log 2>&1; echo "racecheck C rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
for P in M C M C; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1; echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print(P, r['B'], r['L'], r['D'], r['ms'])
PY
done
cp /tmp/pC.json $OUT/attnC.json
timeout 100 /tmp/daC > $OUT/full_C.txt 2>&1; echo "full C rc=$?" >> $OUT/info.txt
timeout 100 /tmp/daM > $OUT/full_M.txt 2>&1; echo "full M rc=$?" >> $OUT/info.txt
diff <(grep -o "out [0-9a-f]*" $OUT/full_M.txt) <(grep -o "out [0-9a-f]*" $OUT/full_C.txt) > /dev/null && echo "output hashes: all equal ($(grep -c 'out ' $OUT/full_C.txt) rows)" >> $OUT/info.txt || echo "output hashes DIFFER" >> $OUT/info.txt
timeout 60 python3 /tmp/torch_sdpa.py --ours $OUT/attnC.json --out /tmp > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" >> $OUT/info.txt
cat $OUT/info.txt; cat $OUT/table.txt; grep "^|" $OUT/sdpa.txt | head -9
