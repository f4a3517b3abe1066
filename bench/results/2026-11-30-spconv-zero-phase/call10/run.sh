#!/bin/bash
# Session 14 call 10: the medium rule from 3 tall blocks a multiprocessor (N2) against F: tests, C = 128 at R = 128-196, spconv at R = 196 and 160
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 150 $X/N2/test_sparse_conv > $OUT/test_N2.txt 2>&1; echo "test N2 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_N2.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "^\[  FAILED" $OUT/test_N2.txt | head >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (128, 160, 196):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for round in 1 2; do for R in 128 160 196; do for v in F N2; do
  timeout 60 $X/$v/spconv --coords /tmp/coords_$R.bin --channels 128 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only none > /tmp/b.json 2>/tmp/b.err
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$v R=$R C=128 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
done; done; done
mkdir -p /tmp/site /tmp/frN
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_N.tar.xz -C /tmp/frN
PYTHONPATH=/tmp/site:/tmp/frN:$H timeout 200 python3 spconv_peer.py --rows 196:128,160:128 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_N2.txt 2>&1
echo "peer N2 rc=$?" >> $OUT/info.txt
cat $OUT/info.txt $OUT/table.txt
grep -A4 "calls back to back" $OUT/peer_N2.txt; grep -A4 "Paired bursts" $OUT/peer_N2.txt
