#!/bin/bash
# Session 31 peer call (main c83febf; the conv kernels as df91a4d): spconv 2.3.8 side by side at C = 128 (R = 256, 1024) and C = 64
# (R = 512, 1024); frugal's Python module built there from the tree. Carried: .gpu/spconv (bench/pack_spconv.sh).
cd "$(dirname "$0")"; R0=$(cd ../../../.. && pwd); T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site && tar -xJf $R0/.gpu/spconv/spconv-site.tar.xz -C /tmp/site
cmake -S $R0 -B /tmp/pb -G Ninja -DFRUGAL_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON=ON -DFRUGAL_TOOLS=OFF -DFRUGAL_TESTS=OFF -DFRUGAL_BENCH=OFF > $OUT/pyb.log 2>&1 && ninja -C /tmp/pb _frugal frugal_py_sources >> $OUT/pyb.log 2>&1; echo "gpu module rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cd $R0/bench && PYTHONPATH=/tmp/site:/tmp/pb/python:$R0/bench timeout 300 python3 spconv_peer.py --rows 1024:64,512:64,426:64,1024:128,256:128 --rep 5 --back-to-back 10 --paired 4 > $OUT/peer.txt 2>&1; echo "peer rc=$? t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
cat $OUT/info.txt
grep -A10 "Paired bursts" $OUT/peer.txt | tail -10; grep -E "^ +[0-9]+ +[0-9]+>" $OUT/peer.txt | head -10; tail -3 $OUT/pyb.log
