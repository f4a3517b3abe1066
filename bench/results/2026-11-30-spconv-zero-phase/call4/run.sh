#!/bin/bash
# Session 14 call 4: the branch as it will land (F: free zero phase, dependent hand-off launch always, three A buffers) against head (H0): tests, sanitizers, the conv, spconv under sustained load
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 150 $X/F/test_sparse_conv > $OUT/test_F.txt 2>&1; echo "test F rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_F.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" $OUT/test_F.txt | head -10 >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (128, 192, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 C=$3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for R in 128 192 256 512 1024; do for v in H0 F; do run $v $R 64; done; done; done
for v in H0 F; do run $v 512s 64; run $v 1024 128; done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.WarpSpecializedOnAFewHundredTiles:SpconvCuda.EveryKernelOnATinyInput:SpconvCudaWgmma.MapEntries*:SpconvCudaWgmma.PipelinedHalo*"
timeout 150 compute-sanitizer --tool memcheck $X/F/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck F rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool racecheck $X/F/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > /tmp/rc.log 2>&1; echo "racecheck F rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/F/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.MapEntries*" > /tmp/sc.log 2>&1; echo "synccheck F rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
cp /tmp/mc.log $OUT/memcheck.log; cp /tmp/rc.log $OUT/racecheck.log
mkdir -p /tmp/site /tmp/frF
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal_F.tar.xz -C /tmp/frF
PYTHONPATH=/tmp/site:/tmp/frF:$H timeout 240 python3 spconv_peer.py --rows 1024:64,512:64,426:64,256:64 --rep 5 --back-to-back 10 --paired 5 > $OUT/peer_F.txt 2>&1
echo "peer F rc=$?" >> $OUT/info.txt
cat $OUT/info.txt; cat $OUT/table.txt
grep -h '^{' $OUT/peer_F.txt | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); p = r.get('paired_spconv_over_frugal')
    print(r['R'], r['ci'], 'spconv', round(r['spconv_ms'],3), 'frugal', round(r['frugal_ms'],3), 'b2b', r.get('spconv_b2b_ms'), r.get('frugal_b2b_ms'), 'paired', p if not isinstance(p, dict) else {k: (round(x,3) if isinstance(x,float) else x) for k,x in p.items()}, 'bitwise', r['frugal_bitwise_repeat'])
"
