#!/bin/bash
# Session 7 call 7: C = 64 tiles in clusters of two sharing each weight slice (TMA multicast), FRUGAL_SPCONV_PAIR=1.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (256, 512, 1024):
  c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
  c.tofile(f'/tmp/coords_{R}.bin')
"
FRUGAL_SPCONV_PAIR=1 timeout 150 $B/test_sparse_conv > /tmp/t.log 2>&1; echo "test_sparse_conv (pair) rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $S
run() {  # name R C env...
  local name=$1 R=$2 C=$3; shift 3
  env "$@" timeout 60 $B/spconv --coords /tmp/coords_$R.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err
  echo "{\"name\": \"$name\", \"r\": $R, \"c\": $C, \"rc\": $?, \"line\": $(tail -1 /tmp/b.json)}" >> $OUT/runs.jsonl
}
for rep in 1 2; do for R in 1024 512 256; do
  run base $R 64 X=0
  run pair $R 64 FRUGAL_SPCONV_PAIR=1
done; done
FRUGAL_SPCONV_PAIR=1 timeout 150 compute-sanitizer --tool memcheck $B/spconv --coords /tmp/coords_256.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 1 --only none > /tmp/mc.log 2>&1; echo "memcheck bench R=256 pair rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $S
cat $S
python3 - <<'PY'
import json, os, re, collections
t = collections.defaultdict(list); d = {}
for l in open(os.environ['OUT'] + '/runs.jsonl'):
  m = re.search(r'"name": "(\w+)", "r": (\d+), "c": (\d+)', l); c = re.search(r'"conv_ms": ([0-9.]+)', l)
  if not (m and c): print('bad', l[:200]); continue
  k = (int(m.group(2)), int(m.group(3)), m.group(1)); t[k].append(float(c.group(1)))
  d[k] = re.findall(r'"(\w+_vs_default_rel)": ([0-9.e+-]+)', l)
for k in sorted(t): print(k, ' '.join(f'{v:.3f}' for v in t[k]), d[k][:6])
PY
