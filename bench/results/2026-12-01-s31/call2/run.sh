#!/bin/bash
# s31 call 2: exp-tw (the next step's full barrier tested a step ahead) against main (S31): test_sparse_conv on
# TW2, then C = 64 R = 1024 / 512 and C = 128 R = 1024 (default dispatch + forced halo kernel), two rounds.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
../../../conv_ab.sh bundle.tar.xz --test TW2 --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 1024:128:128:wgmma_halo_pipe128" S31 TW1 TW2 > $OUT/ab.txt 2>&1
cat $OUT/info.txt; tail -20 $OUT/ab.txt
