#!/bin/bash
# s31 call 11: exp-pair-release (PR) against main (S31): test_sparse_conv, then C = 64 R = 1024 / 512 and C = 128
# R = 1024, two rounds, then memcheck / racecheck / synccheck on PR's halo tests.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
../../../conv_ab.sh bundle.tar.xz --test PR --sanitize PR --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 1024:128:128:wgmma_halo_pipe128" S31 PR > $OUT/ab.txt 2>&1
cat $OUT/info.txt; tail -14 $OUT/ab.txt
