#!/bin/bash
# Session 28 call 1: L0 (main 98395f5), BX (exp-boxes bb89170), EPO (exp-epo 75f2ff2 + FRUGAL_EXP_EPO),
# BXE (exp-bxe cd42947 + FRUGAL_EXP_EPO), three rounds; tests on BX, EPO, BXE; sanitizers on BXE (then BX);
# then BXT (BX + FRUGAL_EXP_TRACE) at R = 1024 and 512.
cd "$(dirname "$0")"
OUT0=$OUT; export OUT=$OUT0/ab
../../../conv_ab.sh bundle.tar.xz --test BX,EPO,BXE --sanitize BXE --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none 512:64:128:none" L0 BX EPO BXE > $OUT0/ab.txt 2>&1
X=/tmp/conv_ab_bundle/cvar
for R in 1024 512; do
  timeout 90 $X/BXT/spconv --coords /tmp/coords_$R.bin --channels 64 --co 64 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only wgmma_halo_pipe > /tmp/b.json 2> /tmp/b.err
  echo "BXT R=$R $(grep -o '"wgmma_halo_pipe_ms": [0-9.]*' /tmp/b.json) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT0/trace.txt
  grep TRACE /tmp/b.err | tail -2 | sed "s/^/BXT R=$R /" >> $OUT0/trace.txt
done
t=$X/BX/test_sparse_conv halo="SpconvCudaWgmma.HaloKernel*"
timeout 100 compute-sanitizer --tool racecheck "$t" --gtest_filter="$halo" 2>&1 | grep "RACECHECK SUMMARY" | tail -1 | sed 's/^/BX racecheck /' >> $OUT0/ab.txt
tail -60 $OUT0/ab.txt; cut -c1-420 $OUT0/trace.txt
