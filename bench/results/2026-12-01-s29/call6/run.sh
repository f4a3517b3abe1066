#!/bin/bash
# Session 29 call 6 (call 5 again: its WS and WB builds failed at launch, their static shared memory past
# HaloPipe's allowance): the per-warpgroup offset skip, exp-wgskip b2c3e15: WS (rows ordered by mask in the
# tile) and WB (+ -DFRUGAL_EXP_WGKEY: ordered by the best leading offset bit, then mask) against MG; tests
# on both, sanitizers on WB; C = 64 at R = 1024 / 512 / 256, three rounds.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test WS,WB --sanitize WB --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none" MG WS WB
