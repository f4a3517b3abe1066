#!/bin/bash
# Session 11: spconv vs frugal, paired alternating bursts of 10 calls for 8 s a row (ratio of adjacent bursts)
cd "$(dirname "$0")"; H=$(pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site /tmp/fr
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal.tar.xz -C /tmp/fr
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 200 > $OUT/clocks.csv &
S=$!
PYTHONPATH=/tmp/site:/tmp/fr:$H timeout 240 python3 spconv_peer.py --rows 1024:64,512:64,426:64,256:64,1024:128,512:128 --rep 5 --back-to-back 10 --paired 8 > $OUT/peer.txt 2>&1
echo "peer rc=$?" >> $OUT/info.txt
kill $S
cat $OUT/info.txt; tail -n 28 $OUT/peer.txt
