#!/bin/bash
# s31 call 14: decode_attention --quick --floor after the review mend (the flush and the floor's stream as one
# kernel, plain loads instead of __ldcs for the floor): the read bandwidth, our times and the floors again.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn
timeout 150 /tmp/bn/cvar/S31K/decode_attention --quick --floor --json $OUT/ours.json > $OUT/bench.txt 2>&1; echo "bench rc=$?"
grep -E "read bandwidth|timing floor|stream floor|^B=" $OUT/bench.txt | head -20
