#!/bin/bash
# Session 28 call 8: main's final head (da18e68, after the review mends) — test_sparse_conv whole, and
# memcheck and synccheck on its halo-kernel tests (the bundle is carried: git ignores it).
cd "$(dirname "$0")"
tar -xJf bundle.tar.xz -C /tmp; t=/tmp/cvar/FINAL/test_sparse_conv halo="SpconvCudaWgmma.HaloKernel*"
timeout 100 $t > $OUT/test.txt 2>&1; echo "test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | tr '\n' ' ')" > $OUT/info.txt
timeout 90 compute-sanitizer --tool memcheck $t --gtest_filter="$halo:SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.*Rule*" > /tmp/mc.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 50 compute-sanitizer --tool synccheck $t --gtest_filter="$halo" > /tmp/sc.log 2>&1
echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt
