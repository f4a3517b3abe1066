#!/bin/bash
# Session 13 call 4: spconv vs frugal main (D, b442def) and vs frugal with the hand-off (H), paired bursts, C = 64
cd "$(dirname "$0")"; H=$(pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
mkdir -p /tmp/site /tmp/frD /tmp/frH
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_main.tar.xz -C /tmp/frD && tar -xJf frugal_new.tar.xz -C /tmp/frH
for v in H D H D; do
  PYTHONPATH=/tmp/site:/tmp/fr$v:$H timeout 200 python3 spconv_peer.py --rows 1024:64,512:64,256:64 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_$v.txt 2>&1
  echo "peer $v rc=$?" >> $OUT/info.txt
  cat $OUT/peer_$v.txt >> $OUT/peer_all_$v.txt
done
cat $OUT/info.txt
for v in D H; do echo "== $v"; grep -h '^{' $OUT/peer_all_$v.txt | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); p = r.get('paired_spconv_over_frugal')
    print(r['R'], r['ci'], 'spconv', round(r['spconv_ms'],3), 'frugal', round(r['frugal_ms'],3), 'b2b', r.get('spconv_b2b_ms'), r.get('frugal_b2b_ms'), 'paired', p if not isinstance(p, dict) else {k: (round(x,3) if isinstance(x,float) else x) for k,x in p.items()}, 'maxdiff', r['max_abs_frugal_vs_spconv'], 'bitwise', r['frugal_bitwise_repeat'])
"; done
