#!/bin/bash
# Session 8 call 3: L1 warm-up of each warp's next chunk (F1 prefetch.global.L1, F2 cp.async.ca 4 B), vs main (da0).
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for T in F1 F2; do timeout 200 /tmp/ta$T > $OUT/test$T.txt 2>&1; echo "test $T rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test$T.txt | head -3 | tr '\n' ' ')" >> $OUT/info.txt; done
for P in 0 F1 F2 0 F1 F2; do
  timeout 100 /tmp/da$P --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1; echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
for r in json.load(open('/tmp/p%s.json'%P))['rows']:
  print(P, r['B'], r['L'], r['D'], r['ms'])
PY
done
M=gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for P in 0 F1 F2; do
  timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --metrics $M /tmp/da$P --shape 8,32,8,128,32768 > /tmp/ncu$P.txt 2>&1; echo "ncu $P rc=$?" >> $OUT/info.txt
  grep -E "^ +(gpu__|l1tex__|smsp__|dram__)" /tmp/ncu$P.txt | sed "s/^/$P /" >> $OUT/ncu.txt
done
cat $OUT/info.txt; cat $OUT/table.txt; cat $OUT/ncu.txt
