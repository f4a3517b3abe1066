#!/bin/bash
# Session 21 call 7: D (main 3875cdc + wgmma_step's descriptors from constant words: the warp-specialized
# kernels — the hand-off kernel and the C ≥ 256 path) against M (main): tests, sanitizers, C = 256
# R = 512 / 1024, C = 128 / 64 R = 1024 (default path: halo + hand-off), two rounds.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/D/test_sparse_conv > $OUT/test_D.txt 2>&1; echo "test D rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_D.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" -A3 $OUT/test_D.txt | head -30 >> $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $3 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  echo "$1 R=$2 C=$3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for v in M D; do run $v 512 256; run $v 1024 256; run $v 1024 128; run $v 1024 64; done; done
timeout 100 compute-sanitizer --tool memcheck $X/D/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.OddSizes*:SpconvCudaWgmma.MapEntries*' > /tmp/mc.log 2>&1; echo "memcheck D rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 100 compute-sanitizer --tool racecheck $X/D/test_sparse_conv --gtest_filter='SpconvCudaWgmma.OddSizes*' > /tmp/rc.log 2>&1; echo "racecheck D rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt
