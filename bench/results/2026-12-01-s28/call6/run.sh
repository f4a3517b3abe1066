#!/bin/bash
# Session 28 call 6: MG (main's halo kernels) against GL (exp-guards 101b145 + -DFRUGAL_EXP_GUARDS: the
# copy-warp kernel's loop in untested groups of four steps, then the tested rest), three rounds; tests and
# sanitizers on GL.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test GL --sanitize GL --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none" MG GL
