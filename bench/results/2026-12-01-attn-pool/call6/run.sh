#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 200 ./V3.ta --gtest_filter='DecodeAttentionCuda.*' 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' '; echo
for rep in 1 2; do for v in M V3; do ./$v.da --mixes | grep -E "^B=" | sed "s/^/$v /"; done; done > $OUT/mixes.txt
python3 - <<'PY'
import re,os,collections
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/mixes.txt'):
    m=re.match(r'(\S+) B=\s*(\d+).*D=\s*(\d+) L=\s*(\d+) (K\d/V\d).*?([\d.]+) ms',l)
    if m: d[(m[3],m[2],m[4],m[5],m[1])].append(float(m[6]))
rows=sorted(set(k[:4] for k in d),key=lambda k:(-int(k[0]),-int(k[2]),k[3]))
for r in rows:
    a=d[r+('M',)]; b=d[r+('V3',)]
    print(" ".join(r),"|","/".join("%.4f"%x for x in a),"|","/".join("%.4f"%x for x in b),"| %+.1f%%"%(100*(min(b)/min(a)-1)))
PY
