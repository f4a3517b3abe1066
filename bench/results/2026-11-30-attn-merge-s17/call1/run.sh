#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in a0.ta a1.ta; do printf "%-8s " $t; timeout 200 ./$t 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|tests ran" | tr '\n' ' '; echo; done
for rep in 1 2 3; do for v in head a0 a1 a2; do echo "== $v"; ./$v.da --quick | grep -E "^B=" | sed 's/K4\/V4 f16 q=f16 //' | cut -c1-150; done; done
./head.da --mixes --json $OUT/mixes_head.json | grep -E "^B=" | cut -c1-150
./a1.da --mixes | grep -E "^B=" | cut -c1-150
python3 ../../bench/torch_sdpa.py --ours $OUT/mixes_head.json --out $OUT 2>&1 | tail -30
timeout 150 compute-sanitizer --tool memcheck ./a1.ta --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
timeout 100 compute-sanitizer --tool racecheck ./a1.ta --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace:DecodeAttentionCuda.RingWrap*' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -4
timeout 100 compute-sanitizer --tool synccheck ./a1.ta --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
