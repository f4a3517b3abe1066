#!/bin/bash
# Session 28 call 2: where the consumers' full waits come from. BXT (exp-boxes + trace), NWT (+ weight slices
# not copied after the first ring round), NRT (+ halo rows not copied), NWRT (neither); branch exp-diag
# 09e6555, outputs of NW*/NR* wrong by design. Two rounds at R = 1024 and 512, C = 64. BX's own sanitizer
# runs are left for the call that measures the build to land (BXE, which holds BX's code, was clean).
cd "$(dirname "$0")"; ROOT=$(cd ../../../.. && pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
python3 $ROOT/bench/shells.py 1024 512
for r in 1 2; do for R in 1024 512; do for v in BXT NWT NRT NWRT; do
  timeout 90 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "$v R=$R round $r rc=$? $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
  grep TRACE /tmp/b.err | tail -2 | sed "s/^/$v R=$R round $r /" >> $OUT/trace.txt
done; done; done
cat $OUT/info.txt; sort -s -k2,2 -k1,1 $OUT/table.txt; cut -c1-400 $OUT/trace.txt | grep "round 1"
