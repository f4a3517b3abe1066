#!/bin/bash
# Session 14 call 13: slot entries by step (SS) against F: tests, memcheck, racecheck, R = 512 and 1024 C = 64
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
timeout 100 $X/SS/test_sparse_conv > $OUT/test_SS.txt 2>&1; echo "test SS rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_SS.txt | tr "\n" " ")" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for round in 1 2 3; do for R in 512 1024; do for v in F SS; do
  timeout 60 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err
  echo "$v R=$R C=64 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
done; done; done
timeout 60 compute-sanitizer --tool memcheck $X/SS/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/mc.log 2>&1; echo "memcheck SS rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 45 compute-sanitizer --tool racecheck $X/SS/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck SS rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt $OUT/table.txt
