#!/bin/bash
# Session 26 call 3: A0 (main) against SP2 (exp-split with the weight lane walked from 0, and the end marker after a barrier), three rounds;
# tests and sanitizers on SP. Bundle: bench/build_variant.sh A0; bench/build_variant.sh SP2 /work/split;
# tar -C .gpu -cJf bench/results/2026-12-01-s26/call3/bundle.tar.xz cvar/{A0,SP2}/{spconv,test_sparse_conv}
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test SP2 --sanitize SP2 --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 1024:128:128:wgmma_halo_pipe128 512:128:128:wgmma_halo_pipe128 1024:128:64:wgmma_halo_pipe" A0 SP2
