#!/usr/bin/env bash
# Session 21 call 1: (a) conv trace of the halo kernel's roles (T = exp-halo-trace, 18b54ea + FRUGAL_EXP_TRACE;
# F = aa89c95, same kernel SASS as main) at R = 512 / 1024, C = 64 / 128; (b) decode attention: the block's
# first rounds of K/V into L2 at entry (AP1/AP2/AP4 = FRUGAL_EXP_PF rounds; AH = main 5888183);
# (c) cluster occupancy of the wide kernel's resources.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/info.txt
$X/clq/clq | tee $OUT/clq.txt
for v in AH AP2; do printf "%-4s " $v; timeout 150 $X/var/$v/ta 2>&1 | grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" | tr '\n' ' ' | cut -c1-300; echo; done | tee -a $OUT/info.txt
for rep in 1 2 3; do
for sh in 8,32,8,128,32768 1,32,8,128,131072 1,32,8,128,4096 8,32,8,64,32768 1,32,8,64,131072; do
  for v in AH AP1 AP2 AP4; do printf "%-4s " $v; $X/var/$v/da --shape $sh | grep -E "^B=" | cut -c1-150; done
done; done > $OUT/attn.txt 2>&1
python3 - <<'PY' | tee $OUT/attn_table.txt
import re,os,collections
d=collections.defaultdict(list); V="AH AP1 AP2 AP4".split()
for l in open(os.environ['OUT']+'/attn.txt'):
    m=re.match(r'(\S+)\s+B=\s*(\d+).*D=\s*(\d+) L=\s*(\d+).*splits=\S+\s+loop=\S+\s+([\d.]+) ms',l)
    if m: d[(m[2],m[3],m[4])+(m[1],)].append(float(m[5]))
rows=sorted(set(k[:3] for k in d),key=lambda k:(int(k[1]),int(k[0]),int(k[2])))
print("B D L | " + " | ".join(V))
for r in rows:
    h=min(d[r+('AH',)])
    print("%s %s %s | "%r + " | ".join("%s %+5.1f%%"%("/".join("%.4f"%x for x in d[r+(v,)]), 100*(min(d[r+(v,)])/h-1)) for v in V))
PY
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C only
  timeout 90 $X/cvar/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $3 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $4 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  echo "$1 R=$2 C=$3 $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ')" >> $OUT/table.txt
  grep "halo trace" /tmp/b.err | tail -3 | sed "s/^/$1 R=$2 C=$3 /" >> $OUT/trace.txt
}
for R in 512 1024; do for v in F T; do run $v $R 64 wgmma_halo_pipe; run $v $R 128 wgmma_halo_pipe128; done; done
cat $OUT/table.txt; cut -c1-400 $OUT/trace.txt
