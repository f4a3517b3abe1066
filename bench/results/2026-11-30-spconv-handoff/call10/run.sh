#!/bin/bash
# Session 13 call 10: M against G4 on the rows that do not run the pipelined kernel (noise or not)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms" >> $OUT/table.txt
}
for round in 1 2 3; do for v in G4 M; do run $v 512s 64; run $v 1024 128; done; done
cat $OUT/table.txt
