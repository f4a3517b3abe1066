#!/bin/bash
# Session 22 call 8: ME (the one-pass kernel's map entries in registers, a tile ahead) against N (main):
# halo tests, C = 64 at R = 196 ... 1024 (forced halo kernel at 512 / 1024), two rounds.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 60 $X/ME/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*" > $OUT/test_ME.txt 2>&1
echo "test ME rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_ME.txt | tr "\n" " ")" >> $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (196, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for R in 1024 512; do for v in N ME; do run $v $R 64 64 wgmma_halo_pipe; done; done
  for R in 196 256; do for v in N ME; do run $v $R 64 64 none; done; done
done
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt
