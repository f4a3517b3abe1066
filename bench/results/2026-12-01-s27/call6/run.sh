#!/bin/bash
# Session 27 call 6: A0 (main cdbb2ae), CW2 (exp-copy b7f077c), CW5 (83af28f), CW5a (83af28f with the
# prologue at 112 registers, weight/copy warps 48), CW5b (83af28f with consumers 168, prologue 120,
# weight/copy 56), three rounds; tests on CW5a and CW5b; sanitizers on CW5b, then on CW5a.
cd "$(dirname "$0")"
OUT0=$OUT; export OUT=$OUT0/ab
../../../conv_ab.sh bundle.tar.xz --test CW5a,CW5b --sanitize CW5b --rounds 3 \
  --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" A0 CW2 CW5 CW5a CW5b > $OUT0/ab.txt 2>&1
t=/tmp/conv_ab_bundle/cvar/CW5a/test_sparse_conv halo="SpconvCudaWgmma.HaloKernel*"
timeout 100 compute-sanitizer --tool memcheck "$t" --gtest_filter="$halo:SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.*Rule*" 2>&1 | grep "ERROR SUMMARY" | tail -1 | sed 's/^/CW5a memcheck /' >> $OUT0/ab.txt
timeout 160 compute-sanitizer --tool racecheck "$t" --gtest_filter="$halo" 2>&1 | grep "RACECHECK SUMMARY" | tail -1 | sed 's/^/CW5a racecheck /' >> $OUT0/ab.txt
timeout 60 compute-sanitizer --tool synccheck "$t" --gtest_filter="$halo" 2>&1 | grep "ERROR SUMMARY" | tail -1 | sed 's/^/CW5a synccheck /' >> $OUT0/ab.txt
cat $OUT0/ab.txt | grep -v "^\s*$" | tail -45
