#!/bin/bash
# Session 27 call 1: where the C = 64 halo kernel's time goes now. A0 (main cdbb2ae), TR (A0 + per-phase
# clock64 trace, FRUGAL_EXP_TRACE on branch exp-trace), PM (consumers without ldmatrix / wgmma:
# FRUGAL_EXP_NOMATH; outputs wrong by design), PMT (PM + trace). Three rounds, R = 1024 and 512, C = 64.
# Bundle: bench/build_variant.sh A0; /tmp/bv_spconv.sh TR|PM|PMT /work/trace -DFRUGAL_EXP_...
cd "$(dirname "$0")"; ROOT=$(cd ../../../.. && pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
python3 $ROOT/bench/shells.py 1024 512
for r in 1 2 3; do for R in 1024 512; do for v in A0 TR PM PMT; do
  timeout 90 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "$v R=$R round $r rc=$? $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
  grep TRACE /tmp/b.err | tail -1 | sed "s/^/$v R=$R round $r /" >> $OUT/trace.txt
done; done; done
cat $OUT/info.txt; sort -s -k2,2 -k1,1 $OUT/table.txt; cut -c1-400 $OUT/trace.txt
