#!/bin/bash
# Session 8 call 8: L1TEX / shared-memory pipe load of main (0), loads only (1), math only (2), B=8 L=32K.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
M=gpu__time_duration.sum,sm__cycles_active.avg,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__lsuin_requests.sum,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__mio_inst_issued.avg.pct_of_peak_sustained_active,sm__mio2rf_writeback_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum,lts__t_sectors.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
for P in 0 1 2; do
  timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --metrics $M /tmp/da$P --shape 8,32,8,128,32768 > /tmp/ncu$P.txt 2>&1; echo "ncu $P rc=$?"
  grep -E "^ +(gpu__|l1tex__|smsp__|dram__|sm__|lts__)" /tmp/ncu$P.txt | sed "s/^/$P /" >> $OUT/ncu.txt
done
grep -i "error\|not found\|invalid" /tmp/ncu0.txt | head -5
cat $OUT/ncu.txt
