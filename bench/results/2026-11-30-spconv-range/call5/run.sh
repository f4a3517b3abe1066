#!/bin/bash
# Session 9 conv call 5: are the two blocks of a multiprocessor in lockstep? G6/G12: the second block of each SM starts 6/12 us late (once). ncu of the halo kernel.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
    c.tofile('/tmp/coords_%d.bin' % R)
"
run() { # label binary R
  timeout 100 $2 --coords /tmp/coords_$3.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_halo > /tmp/b.json 2>&1 || echo "$1 rc=$?" >> $OUT/info.txt
  python3 - $1 $3 >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
print(sys.argv[2], sys.argv[1], 'default %.4f halo %.4f' % (d['conv_ms'], d['wgmma_halo_ms']))
PY
}
for r in 1 2; do run N4 $B/N4/spconv 1024; run G6 $B/G6/spconv 1024; run G12 $B/G12/spconv 1024; done
run N4 $B/N4/spconv 512; run G12 $B/G12/spconv 512
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__warps_active.avg.per_cycle_active
timeout 150 ncu --clock-control none -k regex:kernel_conv_halo --launch-count 1 --metrics $M $B/N4/spconv --coords /tmp/coords_1024.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 1 --only wgmma_halo > $OUT/ncu.txt 2>&1; echo "ncu rc=$?" >> $OUT/info.txt
cat $OUT/info.txt; cat $OUT/table.txt; grep -E "kernel_conv|^ +(gpu__|l1tex__|smsp__|dram__|sm__|lts__)" $OUT/ncu.txt | cut -c1-150
