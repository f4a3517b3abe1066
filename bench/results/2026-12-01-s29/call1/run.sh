#!/bin/bash
# Session 29 call 1: the stagger experiment (exp-stagger 16212ff): MG (main's halo SASS) and E1 (exp-e1
# ad07125, the direct epilogue) against S (exp-stagger + -DFRUGAL_EXP_E1 -DFRUGAL_EXP_STAGGER) with the
# second consumer warpgroup sleeping 0 / 250 / 500 / 2000 ns before its first unit (S_<ns>: a wrapper that
# sets FRUGAL_STAGGER_NS), and S5 / S6 (5- and 6-stage weight rings) at 2000 ns; three rounds; tests on S6.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test S6 --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" MG E1 S_0 S_250 S_500 S_2000 S5_2000 S6_2000
