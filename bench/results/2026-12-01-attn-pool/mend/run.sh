#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
timeout 240 ./R.ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' '; echo
timeout 200 compute-sanitizer --tool memcheck ./R.ta --gtest_filter='DecodeAttentionCuda.F16Wide*:DecodeAttentionCuda.F16LoopFallbacks*' 2>&1 | grep -E "ERROR SUMMARY" | head -2
for rep in 1 2; do for v in H R; do (./$v.da --quick; ./$v.da --mixes) | grep -E "^B=" | sed "s/^/$v /"; done; done > $OUT/rows.txt
python3 - <<'PY'
import re,os,collections
d=collections.defaultdict(list); h=collections.defaultdict(set)
for l in open(os.environ['OUT']+'/rows.txt'):
    m=re.match(r'(\S+) (B=.*?)(?:splits|loop).*?([\d.]+) ms\s.*out (\w+)',l)
    if m: k=(m[2].strip(),m[1]); d[k].append(float(m[3])); h[m[2].strip()].add(m[4])
rows=sorted(set(k[0] for k in d))
bad=[r for r in rows if len(h[r])!=1]
print("rows",len(rows),"hash mismatches",len(bad))
for r in rows:
    a=d[(r,'H')]; b=d[(r,'R')]
    print(r[:60],"|","/".join("%.4f"%x for x in a),"|","/".join("%.4f"%x for x in b),"| %+.1f%%"%(100*(min(b)/min(a)-1)))
PY
