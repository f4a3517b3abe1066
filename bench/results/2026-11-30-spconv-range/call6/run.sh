#!/bin/bash
# Session 9 conv call 6: the range halo as the C <= 64 default (clean build); tests, sanitizers, racecheck of both kernels at scale, shuffled map order.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
timeout 240 $B/test_sparse_conv > $OUT/test.txt 2>&1; echo "test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/test.txt | tr '\n' ' ')" >> $OUT/info.txt
grep -E "^\[  FAILED" $OUT/test.txt | head -5 >> $OUT/info.txt
timeout 200 compute-sanitizer --tool memcheck $B/test_sparse_conv --gtest_filter='*Halo*:*MapEntriesOutsideTheRange*:*DefaultOnALargeGrid*' > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
    if R == 512:
        g = torch.Generator().manual_seed(0)
        c[torch.randperm(c.shape[0], generator=g)].numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
for K in halo ws2; do
  O=wgmma_ws64x2_unsorted; [ $K = halo ] && O=none
  timeout 150 compute-sanitizer --tool racecheck --print-limit 3 $B/spconv --coords /tmp/coords_256.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 1 --only $O > $OUT/rc_$K.log 2>&1; echo "racecheck R=256 $K rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc_$K.log | tail -1) $(grep -o 'Race reported between [A-Za-z]* access at [^(]*' $OUT/rc_$K.log | sort | uniq -c | tr '\n' ' ')" >> $OUT/info.txt
done
run() { # R
  timeout 100 $B/spconv --coords /tmp/coords_$1.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only wgmma_ws64x2_unsorted,wgmma_halo > /tmp/b.json 2>&1 || echo "R=$1 rc=$?" >> $OUT/info.txt
  tail -1 /tmp/b.json >> $OUT/bench.jsonl
  python3 - $1 >> $OUT/table.txt <<'PY'
import json,sys
d=json.loads(open('/tmp/b.json').read().strip().splitlines()[-1])
print(sys.argv[1], 'default %.4f halo %.4f old-default(ws2) %.4f bf16 %.4f' % (d['conv_ms'], d['wgmma_halo_ms'], d['wgmma_ws64x2_unsorted_ms'], d.get('bf16_default_ms', 0)))
PY
}
run 1024; run 512; run 256; run 1024; run 512s; run 512s
cat $OUT/info.txt; cat $OUT/table.txt
