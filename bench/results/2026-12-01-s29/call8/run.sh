#!/bin/bash
# Session 29 call 8: where exp-wgskip hangs. WD = exp-wgskip 9b50aa7 + -DFRUGAL_EXP_WATCHDOG (an mbarrier wait
# that spins ~forever prints its block, thread and barrier, and traps): the halo kernel's tests, 45 s at most.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/b8 && tar -xJf bundle.tar.xz -C /tmp/b8
timeout 45 /tmp/b8/cvar/WD/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*" > $OUT/wd.txt 2>&1
echo "rc=$?" >> $OUT/wd.txt
grep -c WATCHDOG $OUT/wd.txt
grep WATCHDOG $OUT/wd.txt | awk '{print $5, $7, $9}' | sort | uniq -c | sort -rn | head -20
grep -v WATCHDOG $OUT/wd.txt | head -30
