#!/bin/bash
# Session 25 call 6: call 5 again with the probe's second layout (8-byte pieces, a half-warp's loads one line)
# reading V from 16-token read-tiled, token-paired blocks (the bench converts its random cache), against
# main's kernel (A0) on the unconverted cache; outputs compared, `--quick` twice each, alternating.
# Bundle: bench/build_variant.sh A0; bench/build_variant.sh VP <exp-vpair tree> -- -DFRUGAL_VPAIR_PROBE=1;
# tar -C .gpu -cJf bench/results/2026-12-01-s25/call6/bundle.tar.xz cvar/A0 cvar/VP
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
for r in 1 2; do for v in A0 VP; do
  timeout 120 $X/$v/decode_attention --quick --dump /tmp/out_$v > /tmp/q.txt 2>&1; echo "$v round $r rc=$?" >> $OUT/info.txt
  grep -E "^B=" /tmp/q.txt | sed "s/^/$v /" >> $OUT/table.txt
done; done
python3 - >> $OUT/info.txt <<'PY'
import glob, numpy as np
for f in sorted(glob.glob('/tmp/out_A0_*.bin')):
    a = np.fromfile(f, dtype=np.float16).astype(np.float64); b = np.fromfile(f.replace('A0', 'VP'), dtype=np.float16).astype(np.float64)
    print(f.split('/')[-1], 'max |VP - A0| / max |A0| = %.2e' % (np.abs(a - b).max() / np.abs(a).max()), 'max |A0| %.3g' % np.abs(a).max())
PY
cat $OUT/info.txt; sort -s -k2,6 $OUT/table.txt | cut -c1-150
