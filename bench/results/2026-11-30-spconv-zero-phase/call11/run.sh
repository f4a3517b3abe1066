#!/bin/bash
# Session 14 call 11: R = 512 C = 128 with the rows sorted by neighbour mask (NS, experiment) against the default (N) under sustained load
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (196, 512):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for R in 196 512; do
  timeout 60 $X/N2/spconv --coords /tmp/coords_$R.bin --channels 128 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only none,wgmma_ws_r256_sorted,wgmma_ws_r256_unsorted > /tmp/b.json 2>/tmp/b.err
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "R=$R C=128 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ')" >> $OUT/table.txt
done
mkdir -p /tmp/site /tmp/frN /tmp/frNS
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_N.tar.xz -C /tmp/frN && tar -xJf frugal_NS.tar.xz -C /tmp/frNS
for v in N NS; do
  PYTHONPATH=/tmp/site:/tmp/fr$v:$H timeout 150 python3 spconv_peer.py --rows 512:128 --rep 5 --back-to-back 10 --paired 6 > $OUT/peer_$v.txt 2>&1
  echo "peer $v rc=$?" >> $OUT/table.txt
done
cat $OUT/table.txt
for v in N NS; do echo "== $v"; grep -A3 "calls back to back" $OUT/peer_$v.txt | tail -1; grep -A3 "Paired bursts" $OUT/peer_$v.txt | tail -1; grep -E "^ +512" $OUT/peer_$v.txt | head -1; done
