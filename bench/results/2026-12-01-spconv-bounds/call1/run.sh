#!/bin/bash
# Session 20 call 1: what bounds the halo kernel? H (head f17dae1) against W1 (half the weight bytes at
# (shells.py: bench/shells.py; the call ran a copy of it placed here)
# BN = 128), W2 (no weight copies after the first stages), NOH (hand-off kernel not run). W1/W2/NOH give
# wrong outputs by design: timing only.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ')" >> $OUT/table.txt
}
for round in 1 2; do
  for R in 512 1024; do
    for v in H W1 W2 NOH; do run $v $R 64 64 wgmma_halo_pipe; run $v $R 128 128 wgmma_halo_pipe128; done
  done
done
cat $OUT/info.txt $OUT/table.txt
