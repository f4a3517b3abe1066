#!/bin/bash
# Session 13 call 5: the pipelined halo kernel (+ hand-off) forced on smaller shells, against the default there
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (96, 128, 192, 256, 320, 426):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
    print(R, c.shape[0])
" >> $OUT/info.txt
for round in 1 2; do for R in 96 128 192 256 320 426; do
  timeout 60 $X/F/spconv --coords /tmp/coords_$R.bin --channels 64 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only wgmma_halo_pipe,wgmma_ws64x2_unsorted,wgmma_r128,wgmma_unsorted > /tmp/b.json 2>/tmp/b.err || echo "R=$R rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "R=$R $(grep -o '"n": [0-9]*' /tmp/b.json) $(grep -o '"conv_ms": [0-9.]*\|"wgmma_[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ')" >> $OUT/table.txt
done; done
cat $OUT/info.txt $OUT/table.txt
