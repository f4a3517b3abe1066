#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for rep in 1 2; do for v in head new; do echo "== $v"; ./$v.da --quick | grep -E "^B=" | sed 's/K4\/V4 f16 q=f16 //' | cut -c1-150; done; done
for t in test_*; do [ -x $t ] || continue; case $t in *.xz) continue;; esac; printf "%-18s " $t; timeout 240 ./$t 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|tests ran" | tr '\n' ' '; echo; done
timeout 200 compute-sanitizer --tool memcheck ./test_attention --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
timeout 200 compute-sanitizer --tool racecheck ./test_attention --gtest_filter='DecodeAttentionCuda.RingWrap*:DecodeAttentionCuda.F16PathGqa*:DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.F16WideTable*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -4
timeout 200 compute-sanitizer --tool synccheck ./test_attention --gtest_filter='DecodeAttentionCuda.F16MergeInTheLastBlock*:DecodeAttentionCuda.ForcedSplitsAndWorkspace' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
