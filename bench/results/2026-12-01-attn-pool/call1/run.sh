#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for v in H Y8 N16 Y16; do printf "%-4s " $v; timeout 120 ./$v.ta --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' ' | cut -c1-300; echo; done
timeout 120 compute-sanitizer --tool memcheck ./Y16.ta --gtest_filter='DecodeAttentionCuda.F16WideTable*' 2>&1 | grep -E "ERROR SUMMARY" | head -2
timeout 120 compute-sanitizer --tool racecheck ./Y16.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "RACECHECK SUMMARY" | head -2
for rep in 1 2 3; do
for sh in 8,32,8,128,32768 1,32,8,128,131072 8,32,8,64,32768 1,32,8,64,131072 1,32,8,128,4096 32,32,8,128,32768; do
  for v in H Y8 N16 Y16; do printf "%-4s " $v; ./$v.da --shape $sh | grep -E "^B=" | cut -c1-150; done
done; done 2>&1 | tee $OUT/bench.txt | tail -200 > /dev/null
python3 - <<'PY'
import re,os,collections
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/bench.txt'):
    m=re.match(r'(\S+)\s+B=\s*(\d+).*D=\s*(\d+) L=\s*(\d+).*splits=\S+\s+loop=\S+\s+([\d.]+) ms',l)
    if m: d[(m[2],m[3],m[4])+(m[1],)].append(float(m[5]))
rows=sorted(set(k[:3] for k in d),key=lambda k:(int(k[1]),int(k[0]),int(k[2])))
print("B D L | " + " | ".join("%-22s"%v for v in "H Y8 N16 Y16".split()))
for r in rows:
    h=min(d[r+('H',)])
    print("%s %s %s | "%r + " | ".join("%s %+5.1f%%"%("/".join("%.4f"%x for x in d[r+(v,)]), 100*(min(d[r+(v,)])/h-1)) for v in "H Y8 N16 Y16".split()))
PY
