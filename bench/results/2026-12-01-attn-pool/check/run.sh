#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 240 ./test_attention 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' '; echo
timeout 280 compute-sanitizer --tool memcheck ./test_attention --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED" | head -4
timeout 200 compute-sanitizer --tool racecheck ./test_attention --gtest_filter='DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.F16WideTableSmall*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" | head -4
timeout 150 compute-sanitizer --tool synccheck ./test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace:DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED" | head -4
./da --quick | grep -E "^B=" | cut -c1-150
./da --mixes | grep -E "^B=" | cut -c1-150
