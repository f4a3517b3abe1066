#!/bin/bash
# Session 14 call 1: head (H0, 96439ab, never run on the GPU) and the free zero phase (Z; ZP = Z with the
# hand-off kernel always a programmatic dependent) against main b442def (M): tests, sanitizers, ncu, the conv
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
for v in H0 Z; do
  timeout 150 $X/$v/test_sparse_conv > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_$v.txt | tr "\n" " ")" >> $OUT/info.txt
  grep -E "FAILED|Failure" $OUT/test_$v.txt | head -10 >> $OUT/info.txt
done
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (128, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 C=$3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for R in 128 256 512 1024; do for v in H0 Z ZP; do run $v $R 64; done; done; done
for v in M H0 Z; do run $v 512s 64; run $v 1024 128; done
for v in H0 Z; do
  timeout 60 ncu --metrics gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum -k regex:halo_pipe --launch-skip 2 -c 1 $X/$v/spconv --coords /tmp/coords_512.bin --channels 64 --out /tmp/o --mma-only 1 --samples 1 --reps 3 --only none > $OUT/ncu_$v.txt 2>&1; echo "ncu $v rc=$?" >> $OUT/info.txt
done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*:SpconvCudaWgmma.PipelinedHalo*"
timeout 150 compute-sanitizer --tool memcheck $X/Z/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck Z rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck $X/Z/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > /tmp/rc.log 2>&1; echo "racecheck Z rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/Z/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/sc.log 2>&1; echo "synccheck Z rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
cp /tmp/mc.log $OUT/memcheck.log; cp /tmp/rc.log $OUT/racecheck.log
grep -h -E "gpu__time|wavefronts|conflicts" $OUT/ncu_*.txt
cat $OUT/info.txt $OUT/table.txt
