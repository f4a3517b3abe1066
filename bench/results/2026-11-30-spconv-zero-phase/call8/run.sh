#!/bin/bash
# Session 14 call 8: the C = 128 kernels at R = 196 (169 K rows) and 512, single calls: which serves those rows best?
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (196, 256, 512):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
V=none,wgmma_ws,wgmma_ws_unsorted,wgmma_ws_r256_unsorted,wgmma_r256_unsorted,wgmma_unsorted,wgmma_r128
for round in 1 2; do for R in 196 256 512; do
  timeout 120 $X/F/spconv --coords /tmp/coords_$R.bin --channels 128 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only $V > /tmp/b.json 2>/tmp/b.err
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "R=$R C=128 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ')" >> $OUT/table.txt
done; done
cat $OUT/table.txt
