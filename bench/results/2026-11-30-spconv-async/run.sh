#!/bin/bash
# Session 7 call 13: the warp-specialized conv with the gathers arriving on the full barrier themselves
# (cp.async.mbarrier.arrive.noinc; proxy fence in the consumers), FRUGAL_SPCONV_ASYNC=1, on the defaults
# (C = 128: 256-row tiles; C = 64: two blocks).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
  c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
  c.tofile(f'/tmp/coords_{R}.bin')
"
FRUGAL_SPCONV_ASYNC=1 timeout 150 $B/test_sparse_conv > /tmp/t.log 2>&1; echo "test_sparse_conv (async) rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $S
FRUGAL_SPCONV_ASYNC=1 timeout 120 compute-sanitizer --tool racecheck $B/test_sparse_conv --gtest_filter='SpconvCuda.EveryKernelOnATinyInput' > /tmp/rc.log 2>&1; echo "racecheck tiny (async) rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $S
run() {
  local name=$1 R=$2 C=$3; shift 3
  env "$@" timeout 60 $B/spconv --coords /tmp/coords_$R.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err
  echo "{\"name\": \"$name\", \"r\": $R, \"c\": $C, \"rc\": $?, \"line\": $(tail -1 /tmp/b.json)}" >> $OUT/runs.jsonl
}
for rep in 1 2; do for R in 1024 512; do for C in 128 64; do
  run base $R $C X=0
  run async $R $C FRUGAL_SPCONV_ASYNC=1
done; done; done
cat $S
python3 - <<'PY'
import os, re, collections
t = collections.defaultdict(list); d = {}
for l in open(os.environ['OUT'] + '/runs.jsonl'):
  m = re.search(r'"name": "(\w+)", "r": (\d+), "c": (\d+)', l); c = re.search(r'"conv_ms": ([0-9.]+)', l)
  if not (m and c): print('bad', l[:200]); continue
  k = (int(m.group(2)), int(m.group(3)), m.group(1)); t[k].append(float(c.group(1)))
  d[k] = [x for x in re.findall(r'"(\w+_vs_default_rel)": ([0-9.e+-]+)', l) if x[1] not in ('0.000000', '0')]
for k in sorted(t): print(k, ' '.join(f'{v:.3f}' for v in t[k]), 'nonzero diffs:', d[k][:4])
PY
