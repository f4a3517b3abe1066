#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in test_attention test_core test_kv_cache test_kv_codebook test_sparse_conv; do printf "%-18s " $t; timeout 240 ./$t 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|tests ran|SKIPPED \] [0-9]" | tr '\n' ' '; echo; done
timeout 240 compute-sanitizer --tool memcheck ./test_attention --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
timeout 200 compute-sanitizer --tool racecheck ./test_attention --gtest_filter='DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.F16PathGqa*:DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.F16WideTableSmall*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -4
timeout 150 compute-sanitizer --tool synccheck ./test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace:DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
./da --mixes | grep -E "^B=" | cut -c1-150 > $OUT/mixes.txt
./da --quick --json $OUT/quick.json | grep -E "^B=" | cut -c1-150
cat $OUT/mixes.txt
python3 ../../bench/torch_sdpa.py --ours $OUT/quick.json --out $OUT 2>&1 | grep -E "^\|" | head -12
