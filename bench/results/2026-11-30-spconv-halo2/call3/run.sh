#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
./wgmma_ceiling 20000 > $OUT/ceiling.txt 2>&1
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  python3 - $1 $2 $3 >> $OUT/table.txt <<'PY'
import re,sys
l=open('/tmp/b.json').read().strip().splitlines()[-1]
print(' '.join(sys.argv[1:]), re.search(r'"conv_ms": ([0-9.]+)', l).group(1))
PY
}
for v in H H1 H H1; do run $v 1024 64; done
grep ldsm $OUT/ceiling.txt; grep "N= 64" $OUT/ceiling.txt | grep -v ldsm | grep "rs"
cat $OUT/table.txt
