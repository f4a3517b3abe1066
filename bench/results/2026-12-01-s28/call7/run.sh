#!/bin/bash
# Session 28 call 7: MG (main's halo kernels) against NC (exp-noconflict 3a1737d + -DFRUGAL_EXP_NOCONFLICT:
# the ldmatrix rows moved to distinct phases, no bank conflicts; outputs wrong by design), two rounds.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" MG NC
