#!/bin/bash
# Session 9 conv call 2: range halo variants (N4 = call 1, P4 progressive waits, P3 + 3 weight stages); racecheck detail.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
for V in P4 P3; do
timeout 200 $B/$V/test_sparse_conv --gtest_filter='*Halo*:*MapEntriesOutsideTheRange*:*EveryKernel*:*DefaultOnALargeGrid*' > $OUT/test$V.txt 2>&1; echo "test $V rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test$V.txt | tr '\n' ' ')" >> $OUT/info.txt
done
timeout 200 compute-sanitizer --tool racecheck --print-limit 20 $B/N4/test_sparse_conv --gtest_filter='*Halo*' > $OUT/rc_N4.log 2>&1; echo "racecheck N4 rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc_N4.log | tail -1)" >> $OUT/info.txt
timeout 200 compute-sanitizer --tool racecheck $B/P4/test_sparse_conv --gtest_filter='*Halo*' > /tmp/rc.log 2>&1; echo "racecheck P4 rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype('int32')
    c.tofile('/tmp/coords_%d.bin' % R)
"
for R in 1024 512 1024; do for V in N4 P4 P3; do
  timeout 100 $B/$V/spconv --coords /tmp/coords_$R.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_halo > /tmp/b.json 2>&1 || echo "R=$R $V rc=$?" >> $OUT/info.txt
  python3 - $R $V >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
def walk(x, pre=''):
    if isinstance(x, dict):
        for k,v in x.items(): yield from walk(v, pre+k+'.')
    elif isinstance(x, (int,float)): yield pre[:-1], x
print('R', sys.argv[1], sys.argv[2], ' '.join('%s=%.4g'%(k,v) for k,v in walk(d) if k in ('conv_ms','wgmma_halo_ms')))
PY
done; done
cat $OUT/info.txt; cat $OUT/table.txt; grep -m3 -A8 "Race\|Error" $OUT/rc_N4.log | head -40
