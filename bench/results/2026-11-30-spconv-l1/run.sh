#!/bin/bash
# Session 7 call 6: the conv's A gathers through L1 (cp.async.ca) so the rows a step shares with the
# previous one (offsets one apart in z) can hit L1; 3 stages and the smallest carveout to leave L1 room.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
S=$OUT/check.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
  c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
  c.tofile(f'/tmp/coords_{R}.bin')
"
FRUGAL_SPCONV_CA=1 FRUGAL_SPCONV_CARVE=1 FRUGAL_SPCONV_WS_STAGES=3 timeout 150 $B/test_sparse_conv > /tmp/t.log 2>&1; echo "test_sparse_conv (ca, carve, 3 stages) rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t.log | tr '\n' ' ')" >> $S
FRUGAL_SPCONV_CA=1 timeout 150 $B/test_sparse_conv > /tmp/t2.log 2>&1; echo "test_sparse_conv (ca) rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/t2.log | tr '\n' ' ')" >> $S
run() {  # name R C env...
  local name=$1 R=$2 C=$3; shift 3
  env "$@" timeout 60 $B/spconv --coords /tmp/coords_$R.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err
  echo "{\"name\": \"$name\", \"r\": $R, \"c\": $C, \"rc\": $?, \"line\": $(tail -1 /tmp/b.json)}" >> $OUT/runs.jsonl
}
for rep in 1 2; do
for R in 1024 512; do
  run base $R 64 X=0
  run ca $R 64 FRUGAL_SPCONV_CA=1
  run st3 $R 64 FRUGAL_SPCONV_CARVE=1 FRUGAL_SPCONV_WS_STAGES=3
  run st3ca $R 64 FRUGAL_SPCONV_CARVE=1 FRUGAL_SPCONV_WS_STAGES=3 FRUGAL_SPCONV_CA=1
  run base $R 128 X=0
  run st3 $R 128 FRUGAL_SPCONV_CARVE=1 FRUGAL_SPCONV_WS_STAGES=3
  run st3ca $R 128 FRUGAL_SPCONV_CARVE=1 FRUGAL_SPCONV_WS_STAGES=3 FRUGAL_SPCONV_CA=1
done; done
cat $S
python3 - <<'PY'
import json, os, collections
t = collections.defaultdict(list)
for l in open(os.environ['OUT'] + '/runs.jsonl'):
  try: d = json.loads(l); t[(d['r'], d['c'], d['name'])].append(d['line']['conv_ms'])
  except Exception as e: print('bad', l[:150])
for k in sorted(t): print(k, ' '.join(f'{v:.3f}' for v in t[k]))
PY
