#!/bin/bash
# s31 call 12: exp-pair-release over 6 stages (PR6) beside main (S31) and PR, C = 64 R = 1024 / 512, two rounds; timing only.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
../../../conv_ab.sh bundle.tar.xz --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" S31 PR PR6 > $OUT/ab.txt 2>&1
tail -12 $OUT/ab.txt
