#!/bin/bash
# Session 10 conv multicast call 4: the cross-block synchronization at CTA scope (cl2c) and one waiting lane a warp (cl2w).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 100 $X/cl2c/test_sparse_conv --gtest_filter="SpconvCuda*" > $OUT/test_cl2c.txt 2>&1; echo "test cl2c rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_cl2c.txt | tr "\n" " ")" >> $OUT/info.txt
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
for C in 64 128; do for v in base cl2c cl2w; do run $v 1024 $C; done; done
for v in base cl2c cl2w; do run $v 512 64; done
cat $OUT/info.txt
sort -k2,2n -k3,3n -s $OUT/table.txt
