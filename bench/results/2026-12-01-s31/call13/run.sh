#!/bin/bash
# s31 call 13: the bench after folding its repeated pieces (ldsm_a, median_cycles_per_step): the figures again.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
/tmp/bn/cvar/S31J/wgmma_ceiling > $OUT/ceiling.txt 2>&1; echo "rc=$?"
/tmp/bn/cvar/S31J/wgmma_ceiling 40000 > $OUT/ceiling40k.txt 2>&1; echo "rc=$?"
cat $OUT/ceiling.txt; grep -E "N= 64 depth=1" $OUT/ceiling40k.txt | grep -E "wg/SM=2|ring"
