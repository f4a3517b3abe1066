#!/usr/bin/env bash
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== scan (head)"
for s in 1,32,8,128,16384 1,32,8,128,32768 1,32,8,128,65536 1,32,8,128,131072 1,32,8,128,262144 8,32,8,128,8192 8,32,8,128,16384 8,32,8,128,32768 8,32,8,128,65536; do ./head_da --shape $s | grep -E "^B=|timing floor" ; done
echo "== trace"
for s in 1,32,8,128,131072 8,32,8,128,32768 1,32,8,128,4096; do FRUGAL_TRACE_CALL=8 ./trace_da --shape $s 2>&1 | grep -v "^device\|read band"; done
echo "== ncu"
timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 -c 1 --metrics sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed,sm__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second ./head_da --shape 8,32,8,128,32768 2>&1 | grep -v "^==PROF==" | tail -20
timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 -c 1 --section WarpStateStats --section SchedulerStats ./head_da --shape 1,32,8,128,131072 2>&1 | grep -v "^==PROF==" | tail -45
