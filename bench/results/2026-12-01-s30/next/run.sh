#!/bin/bash
# For the next session (not run in s30: the device was withdrawn after call 4). Builds, here, first:
#   TARGETS=spconv bench/build_variant.sh NE2 /work/noepi -- -DFRUGAL_EXP_NOEPI          (exp-noepi d31c1eb)
#   TARGETS="spconv test_sparse_conv" bench/build_variant.sh OV2 /work/ov -- -DFRUGAL_EXP_OV   (exp-ov 08db99d)
#   TARGETS=spconv bench/build_variant.sh OV1 /work/ov -- -DFRUGAL_EXP_OV -DFRUGAL_EXP_OV_HEAD=1
#   TARGETS=spconv bench/build_variant.sh OV3 /work/ov -- -DFRUGAL_EXP_OV -DFRUGAL_EXP_OV_HEAD=3
#   tar -C .gpu -cJf bench/results/2026-12-01-s30/next/bundle.tar.xz cvar/MG cvar/NE2 cvar/OV1 cvar/OV2 cvar/OV3
# (MG: main's halo SASS; rebuild it from main with TARGETS="spconv test_sparse_conv" if .gpu is gone.)
# Then: OV2's tests first (a new order of barrier arrivals: short timeout), then the C = 64 rows, three rounds.
# Sanitizers (memcheck, racecheck, synccheck on the halo tests) in a second call, on the variant that wins.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
timeout 120 /tmp/bn/cvar/OV2/test_sparse_conv > $OUT/test_OV2.txt 2>&1; rc=$?
echo "test OV2 rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_OV2.txt | tr '\n' ' ')" | tee $OUT/info.txt
v="MG NE2 OV1 OV3"; [ $rc -eq 0 ] && v="MG NE2 OV1 OV2 OV3"
../../../conv_ab.sh bundle.tar.xz --rounds 3 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none" $v > $OUT/ab.txt 2>&1
tail -50 $OUT/ab.txt
