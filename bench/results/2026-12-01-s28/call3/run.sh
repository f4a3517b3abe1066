#!/bin/bash
# Session 28 call 3: L0 (main 98395f5), BX (exp-boxes bb89170), MG (exp-chunk 1fe5a09: BX + unsorted calls in
# one launch), three rounds; tests and sanitizers on MG; then BXT2 (exp-diag 1d1a3cc, trace + the launch's
# span and clock) and MGT (exp-diag-chunk 127cbff: the same with one launch) at R = 1024 and 512.
cd "$(dirname "$0")"
OUT0=$OUT; export OUT=$OUT0/ab
../../../conv_ab.sh bundle.tar.xz --test MG --sanitize MG --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 1024:128:128:wgmma_halo_pipe128 512:64:128:none" L0 BX MG > $OUT0/ab.txt 2>&1
X=/tmp/conv_ab_bundle/cvar
for R in 1024 512; do for v in BXT2 MGT; do
  timeout 90 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "$v R=$R $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT0/trace.txt
  grep TRACE /tmp/b.err | tail -2 | sed "s/^/$v R=$R /" >> $OUT0/trace.txt
done; done
tail -48 $OUT0/ab.txt; cut -c1-460 $OUT0/trace.txt
