#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
for v in A B C; do printf "%-4s " $v; timeout 200 ./$v.ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' ' | cut -c1-300; echo; done
timeout 200 compute-sanitizer --tool memcheck ./C.ta --gtest_filter='DecodeAttentionCuda.F16Wide*' 2>&1 | grep -E "ERROR SUMMARY" | head -2
timeout 100 compute-sanitizer --tool racecheck ./C.ta --gtest_filter='DecodeAttentionCuda.F16WideTableSmall*' 2>&1 | grep -E "RACECHECK SUMMARY" | head -2
for rep in 1 2; do
  FRUGAL_ATTN_KERNEL=registers ./A.da --mixes | grep -E "^B=" | sed "s/^/A registers /"
  for v in A B C; do ./$v.da --mixes | grep -E "^B=" | sed "s/^/$v auto /"; done
done > $OUT/mixes.txt
python3 - <<'PY'
import re,os,collections
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/mixes.txt'):
    m=re.match(r'(\S+) (\S+) B=\s*(\d+).*D=\s*(\d+) L=\s*(\d+) (K\d/V\d).*?([\d.]+) ms',l)
    if m: d[(m[4],m[3],m[5],m[6],m[1],m[2])].append(float(m[7]))
rows=sorted(set(k[:4] for k in d),key=lambda k:(-int(k[0]),-int(k[2]),k[3]))
print("D B L mix | regs | A wide | B wide | C wide")
for r in rows:
    a=d[r+('A','registers')]
    print(" ".join(r),"|","/".join("%.4f"%x for x in a),*["| "+"/".join("%.4f"%x for x in d[r+(v,'auto')])+" %+.1f%%"%(100*(min(d[r+(v,'auto')])/min(a)-1)) for v in "ABC"])
PY
