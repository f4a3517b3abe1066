#!/bin/bash
# Session 10 conv call 1: L2 prefetch ahead of the gathers (base, pf3, pf6, map, pf3map); tests + memcheck of pf3map; alternating timing.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
echo "(tests and memcheck: call 1a)" >> $OUT/info.txt

PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>&1 || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/info.txt
  tail -1 /tmp/b.json >> $OUT/bench.jsonl
  python3 - $1 $2 $3 >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
print(' '.join(sys.argv[1:]), '%.4f' % d['conv_ms'])
PY
}
for round in 1 2; do
  for C in 64 128; do for v in base pf3 pf6 map pf3map; do run $v 1024 $C; done; done
done
for v in base pf3 pf6 map pf3map; do run $v 512 64; done
cat $OUT/info.txt; sort -k2,2n -k3,3n -s $OUT/table.txt | awk '{k=$1" R="$2" C="$3; a[k]=a[k]" "$4} END {for (k in a) print k, a[k]}' | sort
