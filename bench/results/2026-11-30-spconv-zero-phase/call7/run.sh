#!/bin/bash
# Session 14 call 7: F against spconv under sustained load on the rest of issue 5's rows (R = 256 at C = 128, 256; TRELLIS.2 levels and upsampling convs)
cd "$(dirname "$0")"; H=$(pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site /tmp/frF
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_F.tar.xz -C /tmp/frF
PYTHONPATH=/tmp/site:/tmp/frF:$H timeout 500 python3 spconv_peer.py --rows 256:128,256:256,20:1024,43:512,92:256,196:128,20:1024:4096,43:512:2048,92:256:1024,196:128:512 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_F.txt 2>&1
echo "peer F rc=$?" >> $OUT/info.txt
cat $OUT/info.txt
grep -B1 -A16 "R      Ci>Co         N" $OUT/peer_F.txt | head -20; grep -A12 "calls back to back" $OUT/peer_F.txt; grep -A12 "Paired bursts" $OUT/peer_F.txt
