#!/bin/bash
# The headline benchmarks of two builds side by side in one run on a GPU machine, alternating build
# by build within each round so both meet the same clocks (the H200's are not locked):
#   decode attention B=8 L=32K and B=1 L=128K (Hq=32, Hkv=8, D=128, K4/V4, fp16 queries),
#   KV prefill append (1M tokens x 8 heads, D=128, 4 bits, fp16 input),
#   submanifold conv 3^3 on the R=1024 sphere shell (4.6M voxels), fp16, C=64/128/256, map order.
#
#   bench/headline.sh OLD_DIR NEW_DIR [ROUNDS]
#
# Each DIR holds the bench programs decode_attention, kv_append and spconv. The table (one row per
# figure: the median over rounds of each build, and new/old) is printed last.
set -u
old=$1 new=$2 rounds=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f /tmp/coords_1024.bin ] || python3 "$HERE/shells.py" 1024 > /dev/null
log=${OUT:-/tmp}/headline.log
: > "$log"
record() { echo "$1|$2|$3" >> "$log"; }  # build|figure|ms
for ((r = 1; r <= rounds; ++r)); do
  for b in old new; do
    d=${!b}
    for s in 8,32,8,128,32768 1,32,8,128,131072; do
      ms=$("$d/decode_attention" --shape $s 2>&1 | grep -oE '[0-9.]+ ms' | tail -1 | cut -d' ' -f1)
      record $b "decode attention B,Hq,Hkv,D,L=$s" "$ms"
    done
    # The prefill table's D=128 4-bit row: its first number after the bits (a kernel column may precede it).
    ms=$("$d/kv_append" 2>&1 | grep -E '^\| 128 \| 4 \|' | head -1 |
      awk -F'|' '{for (i = 4; i <= NF; ++i) if ($i ~ /^ *[0-9.]+ *$/) { gsub(/ /, "", $i); print $i; exit }}')
    record $b "KV prefill append 8M vectors D=128 4 bits" "$ms"
    for c in 64 128 256; do
      json=$("$d/spconv" --coords /tmp/coords_1024.bin --channels $c --out /tmp/headline --reps 10 --mma-only 1 --only none 2>/dev/null)
      record $b "conv R=1024 C=$c (default call)" "$(echo "$json" | grep -oE '"conv_checked_ms": [0-9.]+' | cut -d' ' -f2)"
      record $b "conv R=1024 C=$c (unchecked)" "$(echo "$json" | grep -oE '"conv_ms": [0-9.]+' | cut -d' ' -f2)"
      [ $c = 64 ] && record $b "kernel map R=1024" "$(echo "$json" | grep -oE '"map_ms": [0-9.]+' | cut -d' ' -f2)"
    done
  done
done
python3 - "$log" <<'PY'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    b, fig, ms = line.rstrip("\n").split("|")
    rows.setdefault(fig, {"old": [], "new": []})
    if ms: rows[fig][b].append(float(ms))
print("| figure | old (ms, median) | new (ms, median) | new / old | runs |")
print("|---|---|---|---|---|")
for fig, v in rows.items():
    o = statistics.median(v["old"]) if v["old"] else float("nan")
    n = statistics.median(v["new"]) if v["new"] else float("nan")
    print(f"| {fig} | {o:.4f} | {n:.4f} | {n / o:.3f} | {len(v['old'])}/{len(v['new'])} |")
PY
