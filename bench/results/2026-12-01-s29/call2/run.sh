#!/bin/bash
# Session 29 call 2: the stagger again, with the loop's code kept (exp-stagger d6169c4: the sleep without a
# branch); MG and E1 beside ST_0 / ST_500 / ST_2000 (FRUGAL_STAGGER_NS), three rounds.
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" MG E1 ST_0 ST_500 ST_2000
