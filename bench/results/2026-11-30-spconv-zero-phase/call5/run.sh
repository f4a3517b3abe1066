#!/bin/bash
# Session 14 call 5: the ring as counters (RI4), and 6 stages that way (RI6), against F
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
for v in RI4 RI6; do
  timeout 150 $X/$v/test_sparse_conv > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_$v.txt | tr "\n" " ")" >> $OUT/info.txt
  grep -E "FAILED|Failure" $OUT/test_$v.txt | head -10 >> $OUT/info.txt
done
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 C=$3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2 3; do for R in 256 512 1024; do for v in F RI4 RI6; do run $v $R 64; done; done; done
cat $OUT/info.txt $OUT/table.txt
