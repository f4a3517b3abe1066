#!/bin/bash
# Session 23 call 6 (branch exp-s4): on the lean step (X = main 5b0cce9's kernel), a fourth 16 KB weight
# stage at BN = 128 (S4; CAP 632 -> 568), a third A buffer at BN = 128 (A3), both (S4A3), a fourth at
# BN = 64 (A4).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for v in S4 A3 A4 S4A3; do
  timeout 60 $X/$v/test_sparse_conv --gtest_filter="SpconvCudaWgmma.*Halo*" > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_$v.txt | tr "\n" " ")" >> $OUT/info.txt
done
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for v in X S4 A3 S4A3; do run $v 1024 128 128 wgmma_halo_pipe128; done
  for v in X A4; do run $v 1024 64 64 wgmma_halo_pipe; done
  for v in X S4 A3 S4A3; do run $v 512 128 128 wgmma_halo_pipe128; done
  for v in X A4; do run $v 512 64 64 wgmma_halo_pipe; done
done
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt
