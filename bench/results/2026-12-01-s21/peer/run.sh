#!/bin/bash
# Session 21 peer call (main b47cee2): spconv 2.3.8 side by side at C = 64 and 128 (the GPU module built
# there against the carried libfrugal). Carried: .gpu/spconv, .gpu/fpy.tar.xz.
cd "$(dirname "$0")"; H=$(pwd); R0=$(cd ../../../.. && pwd); T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/fpy /tmp/site && tar -xJf $R0/.gpu/fpy.tar.xz -C /tmp/fpy && tar -xJf $R0/.gpu/spconv/spconv-site.tar.xz -C /tmp/site
cmake -S /tmp/fpy/pyproj -B /tmp/pyb -G Ninja -DCMAKE_PREFIX_PATH=/tmp/fpy/inst -DFRUGAL_SRC=$R0 -DCMAKE_BUILD_TYPE=Release > $OUT/pyb.log 2>&1 && ninja -C /tmp/pyb >> $OUT/pyb.log 2>&1; echo "gpu module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cp $R0/python/frugal/*.py /tmp/pyb/frugal/
cd $R0/bench && PYTHONPATH=/tmp/site:/tmp/pyb:$R0/bench timeout 400 python3 spconv_peer.py --rows 196:64,256:64,512:64,1024:64,196:128,256:128,512:128,1024:128 --rep 5 --back-to-back 10 --paired 4 > $OUT/peer.txt 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cat $OUT/info.txt
grep -A12 "Paired bursts" $OUT/peer.txt | tail -12; grep -E "^ +[0-9]+ +[0-9]+>" $OUT/peer.txt | head -10
