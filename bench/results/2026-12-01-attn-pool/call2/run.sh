#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in W4 W8; do printf "%-4s " $v; timeout 200 ./$v.ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' ' | cut -c1-300; echo; done
timeout 200 compute-sanitizer --tool memcheck ./W4.ta --gtest_filter='DecodeAttentionCuda.F16Wide*:DecodeAttentionCuda.F16LoopFallbacks*' 2>&1 | grep -E "ERROR SUMMARY" | head -2
timeout 100 compute-sanitizer --tool racecheck ./W4.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "RACECHECK SUMMARY" | head -2
timeout 100 compute-sanitizer --tool synccheck ./W4.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "ERROR SUMMARY" | head -2
./H.da --quick | grep -E "^B=" | cut -c1-150 > $OUT/qH.txt; ./W4.da --quick | grep -E "^B=" | cut -c1-150 > $OUT/qW4.txt
paste -d'|' <(awk '{print $1,$2,$4,$5,$6,$(NF-8),$NF}' $OUT/qH.txt) <(awk '{print $(NF-8),$NF}' $OUT/qW4.txt)
for rep in 1 2; do for v in W4 W8; do for l in registers auto; do
  FRUGAL_ATTN_KERNEL=$l ./$v.da --mixes | grep -E "^B=" | grep "D=128" | sed "s/^/$v $l /"; done; done; done > $OUT/mixes.txt
python3 - <<'PY'
import re,os,collections
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/mixes.txt'):
    m=re.match(r'(\S+) (\S+) B=\s*(\d+).*L=\s*(\d+) (K\d/V\d).*?([\d.]+) ms',l)
    if m: d[(m[3],m[4],m[5],m[1],m[2])].append(float(m[6]))
rows=sorted(set(k[:3] for k in d),key=lambda k:(-int(k[1]),k[2]))
print("B L mix | W4 registers | W4 wide | W8 wide | wide/reg")
for r in rows:
    a=d[r+('W4','registers')]; b=d[r+('W4','auto')]; c=d[r+('W8','auto')]
    print(" ".join(r),"|","/".join("%.4f"%x for x in a),"|","/".join("%.4f"%x for x in b),"|","/".join("%.4f"%x for x in c),"| %+.1f%%"%(100*(min(b)/min(a)-1)))
PY
