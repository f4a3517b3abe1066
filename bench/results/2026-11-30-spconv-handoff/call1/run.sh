#!/bin/bash
# Session 13 call 1: the hand-off (N, branch spconv-handoff) against main's binary (M, b442def)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/N/test_sparse_conv > $OUT/test.txt 2>&1; echo "test N rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure|SKIPPED" $OUT/test.txt | head -20 >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for v in M N; do run $v 1024 64; done; done
for v in M N; do run $v 512 64; run $v 512s 64; done
for v in M N; do run $v 1024 128; done
for R in 1024 512s; do
timeout 90 $X/N/spconv --coords /tmp/coords_$R.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_halo_pipe,wgmma_ws64x2_unsorted > $OUT/variants_$R.json 2>&1; echo "variants R=$R: $(grep -o '"[a-z0-9_]*_ms": [0-9.]*' $OUT/variants_$R.json | tr '\n' ' ' | cut -c1-400)" >> $OUT/table.txt
done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*"
timeout 120 compute-sanitizer --tool memcheck $X/N/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck $X/N/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
grep -m3 -A3 "Race reported\|Error:" /tmp/rc.log >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/N/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
timeout 80 compute-sanitizer --tool memcheck $X/N/test_sparse_conv --gtest_filter="SpconvCudaWgmma.PipelinedHaloKernelWhereTheRowsSuitIt" > /tmp/mc2.log 2>&1; echo "memcheck (rule test) rc=$? $(grep 'ERROR SUMMARY' /tmp/mc2.log | tail -1)" >> $OUT/info.txt
cp /tmp/mc.log $OUT/memcheck.log; cp /tmp/rc.log $OUT/racecheck.log
cat $OUT/info.txt; cat $OUT/table.txt
