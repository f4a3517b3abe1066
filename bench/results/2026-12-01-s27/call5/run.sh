#!/bin/bash
# Session 27 call 5: A0 (main cdbb2ae), CW5 (exp-copy 83af28f), CW5S5 (CW5 + -DFRUGAL_EXP_S5), two rounds;
# tests and sanitizers on CW5.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test CW5 --sanitize CW5 --rounds 2 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 512:64:128:none 1024:128:64:wgmma_halo_pipe" A0 CW5 CW5S5
