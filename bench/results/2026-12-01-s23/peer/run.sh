#!/bin/bash
# Session 23 peer call (main, the four-warpgroup halo kernel): spconv 2.3.8 side by side at C = 128 (R = 196 ... 1024) and C = 64
# R = 1024; frugal's Python module built here from the tree. Carried: .gpu/spconv (bench/pack_spconv.sh).
cd "$(dirname "$0")"; H=$(pwd); R0=$(cd ../../../.. && pwd); T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site && tar -xJf $R0/.gpu/spconv/spconv-site.tar.xz -C /tmp/site
cmake -S $R0 -B /tmp/pb -G Ninja -DFRUGAL_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON=ON -DFRUGAL_TOOLS=OFF -DFRUGAL_TESTS=OFF -DFRUGAL_BENCH=OFF > $OUT/pyb.log 2>&1 && ninja -C /tmp/pb _frugal frugal_py_sources >> $OUT/pyb.log 2>&1; echo "gpu module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cd $R0/bench && PYTHONPATH=/tmp/site:/tmp/pb/python:$R0/bench timeout 300 python3 spconv_peer.py --rows 196:128,256:128,512:128,1024:128,1024:64 --rep 5 --back-to-back 10 --paired 4 > $OUT/peer.txt 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cat $OUT/info.txt
grep -A12 "Paired bursts" $OUT/peer.txt | tail -12; grep -E "^ +[0-9]+ +[0-9]+>" $OUT/peer.txt | head -10; tail -5 $OUT/pyb.log
# ncu of the halo kernel at C = 128 R = 1024 (main's kernel, N): pipes, stalls, per-instruction samples.
tar -xJf $H/bundle.tar.xz -C /tmp; X=/tmp/cvar/N
PYTHONPATH=$R0/bench python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
MET="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed"
timeout 150 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 $MET --print-details all $X/spconv --coords /tmp/coords_1024.bin --channels 128 --co 128 --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only wgmma_halo_pipe128 > $OUT/conv128_ncu.txt 2>&1; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
timeout 150 ncu --clock-control none -k regex:kernel_conv_halo_pipe --launch-skip 1 --launch-count 1 --section SourceCounters --page source --print-source sass --csv $X/spconv --coords /tmp/coords_1024.bin --channels 128 --co 128 --out /tmp/o --mma-only 1 --samples 4 --reps 2 --only wgmma_halo_pipe128 > /tmp/conv_src.csv 2>&1; echo "ncu src rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
gzip -c /tmp/conv_src.csv > $OUT/conv128_src.csv.gz
grep -E "Duration|SM Frequency|Issue Slots Busy|Warp Cycles Per Issued|gmma|l1tex__|lts__" $OUT/conv128_ncu.txt | head -20
