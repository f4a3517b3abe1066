#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (1024,):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  python3 - $1 $2 $3 >> $OUT/table.txt <<'PY'
import re,sys
l=open('/tmp/b.json').read().strip().splitlines()[-1]
m=re.search(r'"conv_ms": ([0-9.]+)', l)
print(' '.join(sys.argv[1:]), m.group(1) if m else l[:200])
PY
}
for round in 1 2; do for v in H P PM PS; do run $v 1024 64; done; done
cat $OUT/table.txt
