#!/usr/bin/env bash
# Session 21 call 2: ncu of the pipelined halo kernel (F = aa89c95, main's kernel code) at R = 1024,
# C = 64 and C = 128 (forced): pipe and shared-memory utilization, warp stalls, per-instruction samples.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar/F
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $S
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
MET="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section InstructionStats --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_ldsm.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for C in 64 128; do
  O="wgmma_halo_pipe"; [ $C = 128 ] && O=wgmma_halo_pipe128
  timeout 200 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 $MET --section SourceCounters --print-details all $X/spconv --coords /tmp/coords_1024.bin --channels $C --co $C --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only $O > $OUT/conv${C}_ncu.txt 2>&1; echo "conv $C ncu rc=$?" >> $S
  timeout 200 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $X/spconv --coords /tmp/coords_1024.bin --channels $C --co $C --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only $O > /tmp/conv_src.csv 2>&1; echo "conv $C src rc=$?" >> $S
  gzip -c /tmp/conv_src.csv > $OUT/conv${C}_src.csv.gz
done
cat $S
for C in 64 128; do echo "== C=$C"; grep -E "Duration|SM Frequency|Issued Ipc|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Shared Memory|Bank|gmma|ldsm|l1tex__|lts__|dram__|Mem Pipes|Stall|stall" $OUT/conv${C}_ncu.txt | head -40; done
