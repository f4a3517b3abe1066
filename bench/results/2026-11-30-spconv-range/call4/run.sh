#!/bin/bash
# Session 9 conv call 4: where the range-halo kernel's time goes (S: FRUGAL_HALO_MODE split), E (slot entry read a step ahead), ncu N4 vs default, racecheck on the large grid.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 150 $B/E/test_sparse_conv --gtest_filter='*Halo*:*MapEntriesOutsideTheRange*:*EveryKernel*:*DefaultOnALargeGrid*' > $OUT/testE.txt 2>&1; echo "test E rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/testE.txt | tr '\n' ' ')" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (1024,):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
    c.tofile('/tmp/coords_%d.bin' % R)
"
run() { # label binary env
  env $3 timeout 100 $2 --coords /tmp/coords_1024.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_halo > /tmp/b.json 2>&1 || echo "$1 rc=$?" >> $OUT/info.txt
  python3 - $1 >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
print(sys.argv[1], 'default %.4f halo %.4f' % (d['conv_ms'], d['wgmma_halo_ms']))
PY
}
for r in 1 2; do
  run N4 $B/N4/spconv X=1; run E $B/E/spconv X=1
  run S0 $B/S/spconv FRUGAL_HALO_MODE=0; run S1 $B/S/spconv FRUGAL_HALO_MODE=1; run S2 $B/S/spconv FRUGAL_HALO_MODE=2
done
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__warps_active.avg.per_cycle_active
timeout 150 ncu --clock-control none -k regex:kernel_conv --launch-skip 0 --launch-count 2 --metrics $M $B/N4/spconv --coords /tmp/coords_1024.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 1 --only wgmma_halo > $OUT/ncu.txt 2>&1; echo "ncu rc=$?" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck --print-limit 4 $B/N4/test_sparse_conv --gtest_filter='*EveryKernelOnATinyInput*:SpconvCudaWgmma.MatchesTheCpu*' > $OUT/rc.log 2>&1; echo "racecheck tiny+MatchesTheCpu rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc.log | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt; cat $OUT/table.txt; grep -E "kernel_conv|^ +(gpu__|l1tex__|smsp__|dram__|sm__|lts__)" $OUT/ncu.txt | cut -c1-150; grep -m4 "Race reported\|RUN" $OUT/rc.log
