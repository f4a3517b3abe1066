#!/bin/bash
# Session 8 conv call: where the default conv's time goes at R = 1024 (C = 64, 128): L1 data pipe, L2, tensor pipe.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
c.tofile('/tmp/coords_1024.bin')
"
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__m_xbar2l1tex_read_bytes.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
for C in 64 128; do
  timeout 60 $B/spconv --coords /tmp/coords_1024.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b$C.json 2>&1; echo "C=$C bench rc=$? $(tail -1 /tmp/b$C.json | cut -c1-300)" >> $OUT/info.txt
  timeout 150 ncu --clock-control none -k regex:kernel_conv --launch-skip 1 --launch-count 1 --metrics $M $B/spconv --coords /tmp/coords_1024.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only none > /tmp/ncu$C.txt 2>&1; echo "C=$C ncu rc=$?" >> $OUT/info.txt
  grep -E "kernel_conv|^ +(gpu__|l1tex__|smsp__|dram__|sm__|lts__)" /tmp/ncu$C.txt | sed "s/^/$C /" >> $OUT/ncu.txt
done
cat $OUT/info.txt; cat $OUT/ncu.txt
