#!/bin/bash
# s31 call 4: wgmma_ceiling with A and B rotating over four copies (rot4) beside the fixed-address variants.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
/tmp/bn/cvar/S31C/wgmma_ceiling > $OUT/ceiling.txt 2>&1; echo "rc=$?"
/tmp/bn/cvar/S31C/wgmma_ceiling 40000 > $OUT/ceiling40k.txt 2>&1; echo "rc=$?"
cat $OUT/ceiling.txt; grep -E "N= 64 depth=1" $OUT/ceiling40k.txt
