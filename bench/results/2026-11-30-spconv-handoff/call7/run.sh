#!/bin/bash
# Session 13 call 7: the hand-off kernel as a programmatic dependent (G2) against call 6 (G): tests, sanitizers, the default conv
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/G2/test_sparse_conv > $OUT/test.txt 2>&1; echo "test G2 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure|SKIPPED" $OUT/test.txt | head -20 >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (96, 128, 192, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for R in 96 128 192 256 512 1024; do for v in G G2; do run $v $R 64; done; done; done
for v in G G2; do run $v 512s 64; done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*:SpconvCudaWgmma.PipelinedHalo*"
timeout 150 compute-sanitizer --tool memcheck $X/G2/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck $X/G2/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
grep -m3 -A3 "Race reported\|Error:" /tmp/rc.log | cut -c1-300 >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/G2/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
cp /tmp/mc.log $OUT/memcheck.log; cp /tmp/rc.log $OUT/racecheck.log
cat $OUT/info.txt; cat $OUT/table.txt
