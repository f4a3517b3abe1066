#!/bin/bash
# Side-by-side timing of builds of the sparse conv in one device call, the bench's output hashes
# beside each figure, and the checks of the builds that may land (tests, sanitizers).
#
#   bench/conv_ab.sh BUNDLE [--test V,V] [--sanitize V] [--rounds N] [--rows "R:C:CO:ONLY ..."] V [V ...]
#
# BUNDLE: a folder or a .tar.xz of cvar/V/{spconv,test_sparse_conv}, each variant's programs as
# bench/build_variant.sh builds them (sm_90a, static CUDA runtime); git ignores bench/results/**/bundle.tar.xz,
# so a call's bundle reaches the GPU machine only when the device tool's `carry` names it. Each round times every
# variant on a row before the next row, so that the variants meet the same clocks. A row R:C:CO:ONLY
# is the sphere shell of resolution R (bench/shells.py), C input and CO output channels, and the
# bench's --only (the kernel forced beside the default dispatch; `none`: the default alone).
# $OUT receives info.txt (tests and sanitizers), table.txt (one line a run: variant, row, the
# figures, the output's hash), bench.jsonl (the bench's JSON lines) and sanitizer_head.log; the
# table sorted by row is printed last. --test takes the variants to test (all of test_sparse_conv),
# --sanitize the one to run memcheck, racecheck and synccheck on (the halo kernels' tests).
set -u
OUT=${OUT:-/tmp/conv_ab}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
bundle=$1; shift
tests="" sanitize="" rounds=2
rows="1024:128:128:wgmma_halo_pipe128 1024:64:64:wgmma_halo_pipe 512:128:128:wgmma_halo_pipe128 512:64:64:wgmma_halo_pipe 256:128:128:none 196:128:128:none 1024:128:64:wgmma_halo_pipe"
variants=()
while [ $# -gt 0 ]; do
  case $1 in
    --test) tests=${2//,/ }; shift 2;;
    --sanitize) sanitize=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    --rows) rows=$2; shift 2;;
    *) variants+=("$1"); shift;;
  esac
done
if [ -f "$bundle" ]; then mkdir -p /tmp/conv_ab_bundle && tar -xJf "$bundle" -C /tmp/conv_ab_bundle; X=/tmp/conv_ab_bundle/cvar; else X=$bundle/cvar; fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > "$OUT/info.txt"

shells=$(for r in $rows; do echo "${r%%:*}"; done | sort -un | tr '\n' ' ')
python3 "$HERE/shells.py" $shells  # /tmp/coords_R.bin

for v in $tests; do
  timeout 150 "$X/$v/test_sparse_conv" > /tmp/test_$v.txt 2>&1
  echo "test $v rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/test_$v.txt | tr '\n' ' ')" >> "$OUT/info.txt"
  grep -E 'FAILED|Failure' -A3 /tmp/test_$v.txt | head -20 >> "$OUT/info.txt"
done

run() {  # variant R C CO ONLY
  timeout 90 "$X/$1/spconv" --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 \
    --samples 4096 --reps 10 --only $5 > /tmp/b.json 2> /tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> "$OUT/table.txt"
  cat /tmp/b.json >> "$OUT/bench.jsonl"
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2> /dev/null | cut -c1-12)" >> "$OUT/table.txt"
}
for ((round = 1; round <= rounds; ++round)); do
  for r in $rows; do
    IFS=: read -r R C CO ONLY <<< "$r"
    for v in "${variants[@]}"; do run "$v" "$R" "$C" "$CO" "$ONLY"; done
  done
done

if [ -n "$sanitize" ]; then
  t=$X/$sanitize/test_sparse_conv halo="SpconvCudaWgmma.HaloKernel*"
  timeout 100 compute-sanitizer --tool memcheck "$t" --gtest_filter="$halo:SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.*Rule*" > /tmp/mc.log 2>&1
  echo "memcheck $sanitize rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> "$OUT/info.txt"
  timeout 160 compute-sanitizer --tool racecheck "$t" --gtest_filter="$halo" > /tmp/rc.log 2>&1
  echo "racecheck $sanitize rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> "$OUT/info.txt"
  timeout 60 compute-sanitizer --tool synccheck "$t" --gtest_filter="$halo" > /tmp/sc.log 2>&1
  echo "synccheck $sanitize rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> "$OUT/info.txt"
  grep -B2 -A6 'Error: Race\|Invalid' /tmp/rc.log /tmp/mc.log | head -30 > "$OUT/sanitizer_head.log"
fi
cat "$OUT/info.txt"
sort -s -k2,3 "$OUT/table.txt"
