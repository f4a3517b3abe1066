#!/bin/bash
# Session 7 call 4: per-instruction stall samples (ncu source page) of the attention wide loop (B=8 L=32K)
# and of the conv's default kernel at R = 1024, C = 64 and C = 128.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/summary.txt
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
c.tofile('/tmp/coords_1024.bin')
"
MET="--section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active"
timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 $MET --section SourceCounters --print-details all $B/bench/decode_attention --shape 8,32,8,128,32768 > $OUT/attn_ncu.txt 2>&1; echo "attn ncu rc=$?" >> $S
timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $B/bench/decode_attention --shape 8,32,8,128,32768 > /tmp/attn_src.csv 2>&1; echo "attn src rc=$?" >> $S
gzip -c /tmp/attn_src.csv > $OUT/attn_src.csv.gz
for C in 64 128; do
timeout 150 ncu --clock-control none -k regex:kernel_conv_wgmma_ws --launch-skip 1 --launch-count 1 $MET --section SourceCounters $B/bench/spconv --coords /tmp/coords_1024.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only none > $OUT/conv${C}_ncu.txt 2>&1; echo "conv $C ncu rc=$?" >> $S
timeout 150 ncu --clock-control none -k regex:kernel_conv_wgmma_ws --launch-skip 1 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $B/bench/spconv --coords /tmp/coords_1024.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only none > /tmp/conv_src.csv 2>&1; echo "conv $C src rc=$?" >> $S
gzip -c /tmp/conv_src.csv > $OUT/conv${C}_src.csv.gz
done
cat $S
grep -E "Duration|Issued Ipc|Eligible Warps|No Eligible|Active Warps Per|Warp Cycles Per Issued|L2 Cache Throughput|DRAM Throughput|Mem Pipes|sm__pipe|smsp__inst|lts__|l1tex__" $OUT/attn_ncu.txt | head -30
