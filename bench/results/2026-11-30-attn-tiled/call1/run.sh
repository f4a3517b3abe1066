#!/bin/bash
# Session 15 call 1: tiled-load probes (PK, PV, PKV) against main (T0), decode_attention --quick.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for r in 1 2 3; do for P in T0 PK PV PKV; do
  timeout 60 /tmp/var/$P/da --quick --json /tmp/p$P.json > /tmp/p$P.txt 2>&1 || echo "$P rc=$?" >> $OUT/info.txt
  python3 - $P <<'PY' >> $OUT/table.txt
import json,sys
P=sys.argv[1]
print(P, ' '.join('%.4f'%r['ms'] for r in json.load(open('/tmp/p%s.json'%P))['rows']))
PY
done; done
M=gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
for P in T0 PKV PK; do
  timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --metrics $M /tmp/var/$P/da --shape 8,32,8,128,32768 > /tmp/ncu$P.txt 2>&1; echo "ncu $P rc=$?" >> $OUT/info.txt
  grep -E "^ +(gpu__|l1tex__|smsp__|sm__|dram__)" /tmp/ncu$P.txt | sed "s/^/$P /" >> $OUT/ncu.txt
done
cat $OUT/info.txt; echo "rows: B8L32K D128 | B1L128K | B8L32K D256 | B1L4K | B1L4K D256 | B8L4K"; cat $OUT/table.txt; cat $OUT/ncu.txt
