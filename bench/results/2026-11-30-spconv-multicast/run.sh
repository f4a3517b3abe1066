#!/bin/bash
# Session 10 conv multicast call 1: tests (cl2, cl4), sanitizers on the wgmma tests (cl2), alternating timing of base/cl2/cl4.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for v in cl2 cl4; do
  timeout 120 $X/$v/test_sparse_conv > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_$v.txt | tr '\n' ' ')" >> $OUT/info.txt
  grep -E "^\[  FAILED" $OUT/test_$v.txt | head -5 >> $OUT/info.txt
done
F='SpconvCudaWgmma.*:SpconvCuda.EveryKernelOnATinyInput'
timeout 120 compute-sanitizer --tool memcheck $X/cl2/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck cl2 rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool synccheck $X/cl2/test_sparse_conv --gtest_filter="$F" > /tmp/sc.log 2>&1; echo "synccheck cl2 rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
timeout 150 compute-sanitizer --tool racecheck $X/cl2/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.OddSizes*' > /tmp/rc.log 2>&1; echo "racecheck cl2 rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
cp /tmp/rc.log $OUT/racecheck_cl2.log 2>/dev/null
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/info.txt
  tail -1 /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 $2 $3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1 | cut -d' ' -f2)" >> $OUT/table.txt
}
for round in 1 2; do
  for C in 64 128; do for v in base cl2 cl4; do run $v 1024 $C; done; done
done
for v in base cl2 cl4; do run $v 512 64; run $v 512 256; run $v 1024 256; done
cat $OUT/info.txt
sort -k2,2n -k3,3n -s $OUT/table.txt
