#!/bin/bash
# Session 11: spconv vs frugal (torch op, unchecked), single timed calls and 10 calls back to back, alternating
cd "$(dirname "$0")"; H=$(pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site /tmp/fr
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal.tar.xz -C /tmp/fr
PYTHONPATH=/tmp/site:/tmp/fr:$H timeout 400 python3 spconv_peer.py --rows 1024:64,512:64,426:64,256:64,1024:128,512:128 --rep 10 --back-to-back 10 > $OUT/peer.txt 2>&1
echo "peer rc=$?" >> $OUT/info.txt
cat $OUT/info.txt; tail -n 22 $OUT/peer.txt
