#!/bin/bash
# Session 28 call 4: MG (exp-chunk 1fe5a09; its halo kernels' SASS is main's, 6ca0411) against E1 (exp-e1
# ad07125 + -DFRUGAL_EXP_E1: at one pass, BN = 64, the epilogue straight from the accumulators, no staging,
# no barrier across the consumers), three rounds; tests and sanitizers on E1.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test E1 --sanitize E1 --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 512:64:128:none" MG E1
