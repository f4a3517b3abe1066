#!/bin/bash
# Session 27 call 2: A0 (main cdbb2ae) against CW (exp-copy: three tile states, a copy warp), three rounds;
# tests and sanitizers on CW. Bundle: bench/build_variant.sh A0; T=1 /tmp/bv_spconv.sh CW /work/copy
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test CW --sanitize CW --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 1024:128:128:wgmma_halo_pipe128 1024:128:64:wgmma_halo_pipe 512:64:128:none" A0 CW
