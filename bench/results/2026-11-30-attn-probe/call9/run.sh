#!/bin/bash
# Session 8 call 9: tile token order (T) vs main (da0): tests, memcheck, bench x2, ncu wavefronts.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 200 /tmp/taT > $OUT/testT.txt 2>&1; echo "test T rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testT.txt | head -5 | tr '\n' ' ')" >> $OUT/info.txt
timeout 200 compute-sanitizer --tool memcheck /tmp/taT --gtest_filter='DecodeAttentionCuda.F16BulkRingAndWideTable*:DecodeAttentionCuda.F16LoopFallbacks*:DecodeAttentionCuda.RingWrap*' > /tmp/mc.log 2>&1; echo "memcheck T rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
for P in 0 T 0 T; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1; echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print(P, r['B'], r['L'], r['D'], r['ms'])
PY
done
timeout 100 /tmp/daT > $OUT/full_T.txt 2>&1; echo "full bench T rc=$?" >> $OUT/info.txt
timeout 100 /tmp/da0 > $OUT/full_0.txt 2>&1; echo "full bench 0 rc=$?" >> $OUT/info.txt
M=gpu__time_duration.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
for P in 0 T; do
  timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --metrics $M /tmp/da$P --shape 8,32,8,128,32768 > /tmp/ncu$P.txt 2>&1
  grep -E "^ +(gpu__|l1tex__|smsp__)" /tmp/ncu$P.txt | sed "s/^/$P /" >> $OUT/ncu.txt
done
cat $OUT/info.txt; cat $OUT/table.txt; cat $OUT/ncu.txt
