#!/bin/bash
# Session 11 conv call 1: the range halo on current main; weights' share of the halo and default kernels (NOW: no weight copies after the first STAGES steps; timing only)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 150 $X/H/test_sparse_conv > $OUT/test.txt 2>&1; echo "test H rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
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
import re,sys
l=open('/tmp/b.json').read().strip().splitlines()[-1]
print(' '.join(sys.argv[1:]), re.search(r'"conv_ms": ([0-9.]+)', l).group(1))
PY
}
for round in 1 2; do
  for v in D H DW HW; do run $v 1024 64; done
done
for v in D H DW HW; do run $v 512 64; done
cat $OUT/info.txt
sort -k2,2n -k3,3n -s $OUT/table.txt
