#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 200 ./w.ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|tests ran|FAILED  \]" | head -8
for rep in 1 2; do
for sh in 8,32,8,64,32768 1,32,8,64,131072 1,32,8,64,4096 8,32,8,64,4096 32,32,8,64,8192 8,32,8,128,32768 1,32,8,128,131072; do
  for l in registers auto; do printf "%-9s " $l; FRUGAL_ATTN_KERNEL=$l ./w.da --shape $sh | grep -E "^B=" | cut -c1-140; done
done; done
for sp in 8 16 32; do printf "wide sp=%-3s" $sp; ./w.da --shape 1,32,8,64,4096 --splits $sp | grep -E "^B=" | cut -c1-140; done
for sp in 16 32 64; do printf "wide sp=%-3s" $sp; ./w.da --shape 1,32,8,64,131072 --splits $sp | grep -E "^B=" | cut -c1-140; done
timeout 150 compute-sanitizer --tool memcheck ./w.ta --gtest_filter='DecodeAttentionCuda.F16Wide*:DecodeAttentionCuda.F16LoopFallbacks*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
timeout 100 compute-sanitizer --tool racecheck ./w.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmallWrappedSlices' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | head -4
timeout 100 compute-sanitizer --tool synccheck ./w.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmallWrappedSlices' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | head -4
