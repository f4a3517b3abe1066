#!/bin/bash
# Session 14 call 6: do the tests see a stale zero slot (MZ: only slot 0 re-zeroed, a planted bug)? F against spconv at C = 128, 256
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 120 $X/MZ/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles" > $OUT/test_MZ.txt 2>&1; echo "test MZ rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_MZ.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "^\[  FAILED" $OUT/test_MZ.txt | head -10 >> $OUT/info.txt
mkdir -p /tmp/site /tmp/frF
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_F.tar.xz -C /tmp/frF
PYTHONPATH=/tmp/site:/tmp/frF:$H timeout 300 python3 spconv_peer.py --rows 1024:128,512:128,512:256 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_F.txt 2>&1
echo "peer F rc=$?" >> $OUT/info.txt
cat $OUT/info.txt
grep -A8 "calls back to back" $OUT/peer_F.txt; grep -A8 "Paired bursts" $OUT/peer_F.txt
