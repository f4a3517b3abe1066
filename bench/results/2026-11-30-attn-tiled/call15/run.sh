#!/bin/bash
# Session 15 call 15 (review mend): every conv launch through launch_tile / launch_kernel — test_sparse_conv, memcheck of the hand-off.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
timeout 200 /tmp/cvar/R15/test_sparse_conv > $OUT/test.txt 2>&1; echo "test_sparse_conv rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | head -5 | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool memcheck /tmp/cvar/R15/test_sparse_conv --gtest_filter='SpconvCudaWgmma.PipelinedHaloKernelWhereTheRowsSuitIt:SpconvCuda.EveryKernelOnATinyInput' > /tmp/mc.txt 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.txt | tail -1)"
