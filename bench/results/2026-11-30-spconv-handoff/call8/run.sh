#!/bin/bash
# Session 13 call 8: the branch as it will land (G3) against main (M, b442def); then paired bursts against spconv: tests, sanitizers, the default conv
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/G3/test_sparse_conv > $OUT/test.txt 2>&1; echo "test G3 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure|SKIPPED" $OUT/test.txt | head -20 >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (96, 128, 192, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 6 --reps 20 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for R in 96 128 192 256 512 1024; do for v in M G3; do run $v $R 64; done; done; done
for v in M G3; do run $v 512s 64; done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*:SpconvCudaWgmma.PipelinedHalo*"
timeout 150 compute-sanitizer --tool memcheck $X/G3/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck $X/G3/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > /tmp/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
grep -m3 -A3 "Race reported\|Error:" /tmp/rc.log | cut -c1-300 >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/G3/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
cp /tmp/mc.log $OUT/memcheck.log; cp /tmp/rc.log $OUT/racecheck.log

mkdir -p /tmp/site /tmp/frD /tmp/frH
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_main.tar.xz -C /tmp/frD && tar -xJf frugal_new.tar.xz -C /tmp/frH
for v in H D; do
  PYTHONPATH=/tmp/site:/tmp/fr$v:$H timeout 200 python3 spconv_peer.py --rows 1024:64,512:64,426:64,256:64 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_$v.txt 2>&1
  echo "peer $v rc=$?" >> $OUT/info.txt
done
cat $OUT/info.txt; cat $OUT/table.txt
for v in D H; do echo "== $v"; grep -h '^{' $OUT/peer_$v.txt | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); p = r.get('paired_spconv_over_frugal')
    print(r['R'], r['ci'], 'spconv', round(r['spconv_ms'],3), 'frugal', round(r['frugal_ms'],3), 'b2b', r.get('spconv_b2b_ms'), r.get('frugal_b2b_ms'), 'paired', p if not isinstance(p, dict) else {k: (round(x,3) if isinstance(x,float) else x) for k,x in p.items()}, 'bitwise', r['frugal_bitwise_repeat'])
"; done
