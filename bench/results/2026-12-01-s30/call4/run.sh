#!/bin/bash
# s30 call 4: how much of the C = 64 conv the halo kernels' epilogue is. NE (exp-noepi 15660d6 + FRUGAL_EXP_NOEPI:
# no staging, no stores, no consumer barriers) and NS (+ FRUGAL_EXP_NOSTORE: staged, not stored) against MG.
# Diagnostics: their outputs are wrong by design.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
../../../conv_ab.sh bundle.tar.xz --rounds 3 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" MG NE NS > $OUT/ab.txt 2>&1
tail -20 $OUT/ab.txt
