#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 120 $X/PT/test_sparse_conv --gtest_filter='SpconvCudaWgmma.*:SpconvCuda.EveryKernel*' > $OUT/test.txt 2>&1; echo "test PT rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
  grep TRACE /tmp/b.err | tail -1 | sed "s/^/$1 R=$2: /" >> $OUT/trace.txt
}
for round in 1 2; do for v in D P PT PT8 PTN PMT; do run $v 1024 64; done; done
for v in D P PT PT8 PTN PMT; do run $v 512 64; done
cat $OUT/info.txt; cat $OUT/table.txt; cat $OUT/trace.txt
