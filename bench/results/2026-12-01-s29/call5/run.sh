#!/bin/bash
# Session 29 call 5: the per-warpgroup offset skip (exp-wgskip): WS (8c4edfd: rows ordered by mask in the
# tile) and WB (1a91ce5 + -DFRUGAL_EXP_WGKEY: ordered by the best leading offset bit, then mask) against MG;
# tests on both, sanitizers on WB; C = 64 at R = 1024 / 512 / 256, three rounds.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test WS,WB --sanitize WB --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none" MG WS WB
