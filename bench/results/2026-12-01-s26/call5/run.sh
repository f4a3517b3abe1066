#!/bin/bash
# Session 26 call 5: M1 (main with the tile counter) against PH (exp-phand: the hand-off kernel as its resident blocks walking the list), two rounds;
# tests and sanitizers on PH. Bundle: bench/build_variant.sh M1; bench/build_variant.sh PH /work/phand;
# tar -C .gpu -cJf bench/results/2026-12-01-s26/call5/bundle.tar.xz cvar/{M1,PH}/{spconv,test_sparse_conv}
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test PH --sanitize PH --rounds 2 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 1024:128:128:wgmma_halo_pipe128 512:128:128:wgmma_halo_pipe128 1024:128:64:wgmma_halo_pipe" M1 PH
# The hand-off instance's walk over several listed tiles a block runs only in the rule test's forced
# halo calls on the shuffled shell (every tile handed off): racecheck there too.
X=/tmp/conv_ab_bundle/cvar/PH/test_sparse_conv
timeout 200 compute-sanitizer --tool racecheck $X --gtest_filter='SpconvCudaWgmma.PipelinedHalo*' > /tmp/rc2.log 2>&1
echo "racecheck PH PipelinedHalo* rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc2.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/rc2.log)" | tee -a ${OUT:-/tmp/conv_ab}/info.txt
