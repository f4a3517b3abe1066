#!/bin/bash
# s30 call 3: decode attention at main (f96adbc; attention code unchanged since s26) against torch SDPA fp16
# in the same call: --quick --sweep (the target rows with their slice sweeps), then the side-by-side table.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}; mkdir -p /tmp/bn && tar -xJf bundle.tar.xz -C /tmp/bn; X=/tmp/bn/cvar/AM30
timeout 120 $X/test_attention > $OUT/test_attention.txt 2>&1; echo "test_attention rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test_attention.txt | tr '\n' ' ')" | tee $OUT/info.txt
timeout 200 $X/decode_attention --quick --sweep --json $OUT/ours.json > $OUT/bench.txt 2>&1; echo "bench rc=$?" | tee -a $OUT/info.txt
timeout 200 python3 ../../../torch_sdpa.py --ours $OUT/ours.json --out $OUT > $OUT/sdpa.txt 2>&1; echo "sdpa rc=$?" | tee -a $OUT/info.txt
grep -E "read bandwidth|timing floor" $OUT/bench.txt; tail -12 $OUT/sdpa.txt
