#!/bin/bash
# Session 27 call 4: A0 (main cdbb2ae), CW3 (exp-copy b5de11b), CW4 (CW3 + -DFRUGAL_EXP_S5), two rounds;
# tests and sanitizers on CW3; then CW3T (CW3 + FRUGAL_EXP_TRACE) at R = 1024 and 512.
cd "$(dirname "$0")"
OUT0=$OUT; export OUT=$OUT0/ab
../../../conv_ab.sh bundle.tar.xz --test CW3 --sanitize CW3 --rounds 2 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 512:64:128:none 1024:128:128:wgmma_halo_pipe128" A0 CW3 CW4 > $OUT0/ab.txt 2>&1
X=/tmp/conv_ab_bundle/cvar
for R in 1024 512; do
  timeout 90 $X/CW3T/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "CW3T R=$R $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT0/trace.txt
  grep TRACE /tmp/b.err | tail -2 | sed "s/^/CW3T R=$R /" >> $OUT0/trace.txt
done
tail -40 $OUT0/ab.txt; cut -c1-420 $OUT0/trace.txt
