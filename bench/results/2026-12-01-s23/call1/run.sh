#!/bin/bash
# Session 23 call 1: the halo kernel in four warpgroups with setmaxnreg (branch exp-regs) — R3 (same A depth
# as main), RA (one more A buffer: 4 at BN = 64, 3 at BN = 128), RB (5 / 4) — against M (main f14653d).
cd "$(dirname "$0")"; H=$(pwd)
mkdir -p /tmp/cvar && tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar; mv /tmp/M $X/M
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for v in RA R3 RB; do
  F=$([ $v = RA ] && echo "*" || echo "SpconvCudaWgmma.*Halo*")
  timeout 150 $X/$v/test_sparse_conv --gtest_filter="$F" > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_$v.txt | tr "\n" " ")" >> $OUT/info.txt
  grep -E "FAILED|Failure" -A3 $OUT/test_$v.txt | head -20 >> $OUT/info.txt
done
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for v in M R3 RA RB; do run $v 1024 64 64 wgmma_halo_pipe; run $v 1024 128 128 wgmma_halo_pipe128; done
  for v in M R3 RA RB; do run $v 512 64 64 wgmma_halo_pipe; run $v 512 128 128 wgmma_halo_pipe128; done
  for v in M RA; do run $v 1024 128 64 wgmma_halo_pipe; done
done
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt
