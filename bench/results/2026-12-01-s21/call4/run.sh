#!/bin/bash
# Session 21 call 4: which of call 3's three changes costs at C = 64 — LA (entries in step order only),
# LB (descriptors / ring stage only), LC (ldmatrix addresses only), L (all), LF (none: the macros' old
# paths, = F), F (aa89c95). Forced halo kernel, C = 64 R = 512 / 1024, C = 128 R = 1024, two rounds.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $3 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $4 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  echo "$1 R=$2 C=$3 $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for v in F LF L LA LB LC; do run $v 512 64 wgmma_halo_pipe; run $v 1024 64 wgmma_halo_pipe; run $v 1024 128 wgmma_halo_pipe128; done
done
sort -k2,3 -s $OUT/table.txt | awk '{print}' 
