#!/bin/bash
# Session 9 conv call 1: the range halo kernel (wgmma_halo) against the default, tests + sanitizers.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 240 $B/test_sparse_conv > $OUT/test.txt 2>&1; echo "test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | tr '\n' ' ')" >> $OUT/info.txt
grep -E "FAILED|Failure" $OUT/test.txt | head -5 >> $OUT/info.txt
F='*Halo*:*MapEntriesOutsideTheRange*'
timeout 200 compute-sanitizer --tool memcheck $B/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 200 compute-sanitizer --tool racecheck $B/test_sparse_conv --gtest_filter='*Halo*' > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 200 compute-sanitizer --tool synccheck $B/test_sparse_conv --gtest_filter='*Halo*' > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
    c.tofile('/tmp/coords_%d.bin' % R)
"
for R in 1024 512 1024 256; do
  timeout 100 $B/spconv --coords /tmp/coords_$R.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_halo > /tmp/b.json 2>&1; echo "R=$R rc=$?" >> $OUT/info.txt
  tail -1 /tmp/b.json >> $OUT/bench.jsonl
  python3 - $R >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
def walk(x, pre=''):
    if isinstance(x, dict):
        for k,v in x.items(): yield from walk(v, pre+k+'.')
    elif isinstance(x, (int,float)): yield pre[:-1], x
print('R', sys.argv[1], ' '.join('%s=%.4g'%(k,v) for k,v in walk(d) if ('ms' in k or 'halo' in k) and 'map' not in k))
PY
done
cat $OUT/info.txt; cat $OUT/table.txt
