#!/bin/bash
# For the next session (not run in s30: the device was withdrawn after call 4). Builds, here, first:
#   TARGETS=spconv bench/build_variant.sh NE2 /work/noepi -- -DFRUGAL_EXP_NOEPI          (exp-noepi d31c1eb)
#   TARGETS="spconv test_sparse_conv" bench/build_variant.sh OV2 /work/ov -- -DFRUGAL_EXP_OV   (exp-ov 08db99d)
#   TARGETS=spconv bench/build_variant.sh OV1 /work/ov -- -DFRUGAL_EXP_OV -DFRUGAL_EXP_OV_HEAD=1
#   TARGETS=spconv bench/build_variant.sh OV3 /work/ov -- -DFRUGAL_EXP_OV -DFRUGAL_EXP_OV_HEAD=3
#   TARGETS="spconv test_sparse_conv" bench/build_variant.sh OVD /work/ov -- -DFRUGAL_EXP_OV -DFRUGAL_EXP_OV_DIRECT
#   tar -C .gpu -cJf bench/results/2026-12-01-s30/next/bundle.tar.xz cvar/MG cvar/NE2 cvar/OV1 cvar/OV2 cvar/OV3 cvar/OVD
# (exp-ov add72f9: OV1-3 as 08db99d, OVD its direct form.)
# (MG: main's halo SASS; rebuild it from main with TARGETS="spconv test_sparse_conv" if .gpu is gone.)
# Then: OV2's and OVD's tests first (a new order of barrier arrivals: short timeout), then the C = 64 rows, two rounds (~6 min in all).
# Sanitizers (memcheck, racecheck, synccheck on the halo tests) in a second call, on the variant that wins.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
v="MG NE2"
for t in OV2 OVD; do
  timeout 120 /tmp/bn/cvar/$t/test_sparse_conv > $OUT/test_$t.txt 2>&1; rc=$?
  echo "test $t rc=$rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_$t.txt | tr '\n' ' ')" | tee -a $OUT/info.txt
  [ $rc -eq 0 ] && { [ $t = OV2 ] && v="$v OV1 OV2 OV3" || v="$v OVD"; }
done
../../../conv_ab.sh bundle.tar.xz --rounds 2 --rows "1024:64:64:wgmma_halo_pipe 512:64:64:wgmma_halo_pipe 256:64:64:none" $v > $OUT/ab.txt 2>&1
tail -50 $OUT/ab.txt
