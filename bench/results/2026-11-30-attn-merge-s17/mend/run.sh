#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 200 ./ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | head -5
./da --quick | grep -E "^B=" | grep -o "L=.*D=.*\|out [0-9a-f]*" | paste - - | cut -c1-40,100-
./da --mixes | grep -E "D= 64" | grep -o "out [0-9a-f]*"
timeout 150 compute-sanitizer --tool memcheck ./ta --gtest_filter='DecodeAttentionCuda.F16Wide*:DecodeAttentionCuda.F16LoopFallbacks*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -3
