#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 200 ./b3.ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | head -5
for rep in 1 2; do for v in base b3; do echo "== $v"; ./$v.da --mixes | grep -E "^B=" | sed 's/ f16 q=f16 splits=auto loop=auto//' | cut -c1-110; done; done
timeout 150 compute-sanitizer --tool memcheck ./b3.ta --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -3
