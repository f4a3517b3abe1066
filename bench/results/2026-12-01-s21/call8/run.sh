#!/bin/bash
# Session 21 call 8: racecheck of D (exp-step-desc) on the tests that run every kernel on small inputs.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
timeout 150 compute-sanitizer --tool racecheck /tmp/cvar/D/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.OutputDoesNotDependOnTilingOrRowOrder' > $OUT/rc.log 2>&1; echo "racecheck D rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc.log | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $OUT/rc.log | tr '\n' ' ')"
