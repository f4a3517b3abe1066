#!/bin/bash
# Session 26 call 4: A0 (main) against DT (exp-dyn: the halo walk claims its tiles from a counter), three rounds;
# tests and sanitizers on DT. Bundle: bench/build_variant.sh A0; bench/build_variant.sh DT /work/dyn;
# tar -C .gpu -cJf bench/results/2026-12-01-s26/call4/bundle.tar.xz cvar/{A0,DT}/{spconv,test_sparse_conv}
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test DT --sanitize DT --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 1024:128:128:wgmma_halo_pipe128 512:128:128:wgmma_halo_pipe128 1024:128:64:wgmma_halo_pipe" A0 DT
