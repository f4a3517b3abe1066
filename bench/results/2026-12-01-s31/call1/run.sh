#!/bin/bash
# s31 call 1: the floors (see ../../2026-12-01-s31.md): wgmma ceiling in cycles a step, main's conv at
# C = 64 (R = 1024, 512), decode attention --quick --floor with SDPA in the same call. SM clocks sampled
# throughout (smi.csv).
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn; X=/tmp/bn/cvar/S31
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
echo "ceiling start $(date +%T.%N)" > $OUT/marks.txt
timeout 120 $X/wgmma_ceiling > $OUT/ceiling.txt 2>&1; echo "ceiling rc=$?" | tee $OUT/info.txt
echo "conv start $(date +%T.%N)" >> $OUT/marks.txt
OUT=$OUT/conv ../../../conv_ab.sh /tmp/bn --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe" S31 > $OUT/ab.txt 2>&1
echo "attn start $(date +%T.%N)" >> $OUT/marks.txt
timeout 200 $X/decode_attention --quick --floor --json $OUT/ours.json > $OUT/bench.txt 2>&1; echo "bench rc=$?" | tee -a $OUT/info.txt
timeout 200 python3 ../../../torch_sdpa.py --ours $OUT/ours.json --out $OUT > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" | tee -a $OUT/info.txt
echo "end $(date +%T.%N)" >> $OUT/marks.txt
kill $SMI
grep -E "rs\+ldsm|N= 64 depth=1  wg/block=2 blocks/SM=1" $OUT/ceiling.txt; tail -6 $OUT/ab.txt
grep -E "stream floor|read bandwidth|timing floor" $OUT/bench.txt; tail -22 $OUT/sdpa.txt | head -14
