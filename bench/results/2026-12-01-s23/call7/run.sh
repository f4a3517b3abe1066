#!/bin/bash
# Session 23 call 7: F4 (main + four A buffers at BN = 64) against X (main's kernel before): checks, C = 64.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
timeout 70 $X/F4/test_sparse_conv > $OUT/test_F4.txt 2>&1; echo "test F4 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_F4.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" -A3 $OUT/test_F4.txt | head -20 >> $OUT/info.txt
run() { # variant R C CO only
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for v in X F4; do run $v 1024 64 64 wgmma_halo_pipe; done; done
timeout 80 compute-sanitizer --tool memcheck $X/F4/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*" > /tmp/mc.log 2>&1; echo "memcheck F4 rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 150 compute-sanitizer --tool racecheck $X/F4/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck F4 rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
grep -B2 -A6 "Error: Race\|Invalid" /tmp/rc.log /tmp/mc.log | head -30 > $OUT/sanitizer_head.log
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt
