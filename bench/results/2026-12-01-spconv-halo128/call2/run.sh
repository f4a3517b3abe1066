#!/bin/bash
# Session 19 call 2: N2 (PASSES a template parameter; the rule takes the halo kernel at 64 < Ci, Co ≤ 128)
# against main 28bd979 (M): tests, sanitizers on the halo tests, C = 64 and C = 128 defaults, other shapes.
# (shells.py: bench/shells.py; the call ran a copy of it placed here)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 220 $X/N2/test_sparse_conv > $OUT/test_N2.txt 2>&1; echo "test N2 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_N2.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" -A3 $OUT/test_N2.txt | head -30 >> $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (128, 160, 196, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for R in 512 1024; do for v in N2 M; do run $v $R 64 64 none; done; done
  for R in 128 160 196 256 512 1024; do run N2 $R 128 128 none,wgmma_ws_r256_unsorted; run M $R 128 128 none; done
done
run N2 512 128 64 none,wgmma_halo_pipe; run N2 512 64 128 none,wgmma_halo_pipe128
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*"
timeout 100 compute-sanitizer --tool racecheck $X/N2/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck N2 rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 100 compute-sanitizer --tool memcheck $X/N2/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck N2 rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/N2/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/sc.log 2>&1; echo "synccheck N2 rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
grep -B2 -A6 "Error: Race" /tmp/rc.log | head -60 > $OUT/racecheck_head.log
cat $OUT/info.txt $OUT/table.txt
