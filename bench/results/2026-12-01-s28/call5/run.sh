#!/bin/bash
# Session 28 call 5: ncu of the halo kernel at C = 64 R = 1024 on MG (exp-chunk 1fe5a09: main 6ca0411's halo
# kernels), the same sections and metrics as session 24's call 7 (main 9364c91, before the copy warp), so
# the two read side by side: pipes, stalls, per-instruction samples.
cd "$(dirname "$0")"; H=$(pwd); ROOT=$(cd ../../../.. && pwd); T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
tar -xJf $H/bundle.tar.xz -C /tmp; X=/tmp/cvar/MG
python3 $ROOT/bench/shells.py 1024
MET="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_ldsm.sum"
timeout 150 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 $MET --print-details all $X/spconv --coords /tmp/coords_1024.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only wgmma_halo_pipe > $OUT/conv64_ncu.txt 2>&1; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
timeout 150 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $X/spconv --coords /tmp/coords_1024.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only wgmma_halo_pipe > /tmp/conv_src.csv 2>&1; echo "ncu src rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
gzip -c /tmp/conv_src.csv > $OUT/conv64_src.csv.gz
cat $OUT/info.txt
grep -E "Duration|SM Frequency|Issue Slots Busy|Warp Cycles Per Issued|gmma|l1tex__|lts__|ldsm|Shared Memory|Stall" $OUT/conv64_ncu.txt | head -40
