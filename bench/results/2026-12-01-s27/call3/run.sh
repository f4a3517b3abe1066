#!/bin/bash
# Session 27 call 3: A0 (main cdbb2ae) against CW2 (exp-copy 2nd commit), two rounds, tests and sanitizers on
# CW2; then the traced builds CWT (exp-copy + FRUGAL_EXP_TRACE) and TR (call 1's) side by side, R = 1024 / 512.
cd "$(dirname "$0")"; H=$(pwd)
OUT0=$OUT; export OUT=$OUT0/ab
../../../conv_ab.sh bundle.tar.xz --test CW2 --sanitize CW2 --rounds 2 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 512:64:128:none" A0 CW2 > $OUT0/ab.txt 2>&1
X=/tmp/conv_ab_bundle/cvar
for r in 1 2; do for R in 1024 512; do for v in CWT TR; do
  timeout 90 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "$v R=$R round $r $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT0/trace.txt
  grep TRACE /tmp/b.err | tail -2 | sed "s/^/$v R=$R round $r /" >> $OUT0/trace.txt
done; done; done
cat $OUT0/ab.txt | tail -25; cut -c1-420 $OUT0/trace.txt
