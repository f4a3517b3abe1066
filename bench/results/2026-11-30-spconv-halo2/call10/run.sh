#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  python3 - $1 $2 $3 >> $OUT/table.txt <<'PY'
import re,sys
l=open('/tmp/b.json').read().strip().splitlines()[-1]
m=re.search(r'"conv_ms": ([0-9.]+)', l)
print(' '.join(sys.argv[1:]), m.group(1) if m else l[:200], end=' ')
PY
  md5sum /tmp/o.out | cut -c1-12 >> $OUT/table.txt
}
for round in 1 2; do for v in D H P; do run $v 512s 64; done; done
cat $OUT/table.txt
