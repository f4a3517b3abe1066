#!/bin/bash
# Session 21 call 3: L (the lean consumer step: entries in step order, descriptors and stage advanced without division, ldmatrix addresses by OR/XOR) against F (aa89c95, main's kernel code): tests, sanitizers on the
# (shells.py: bench/shells.py; the call ran a copy of it placed here)
# halo and rule tests, C = 64 / 128 at R = 196 … 1024 (forced halo kernel at 512 / 1024, default below).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
timeout 200 $X/L/test_sparse_conv > $OUT/test_L.txt 2>&1; echo "test L rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_L.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" -A3 $OUT/test_L.txt | head -30 >> $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (196, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do
  for R in 512 1024; do for v in F L; do run $v $R 64 64 wgmma_halo_pipe; run $v $R 128 128 wgmma_halo_pipe128; done; done
  for R in 196 256; do for v in F L; do run $v $R 128 128 none; run $v $R 64 64 none; done; done
done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*"
timeout 200 compute-sanitizer --tool racecheck $X/L/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck L rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 120 compute-sanitizer --tool memcheck $X/L/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck L rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/L/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/sc.log 2>&1; echo "synccheck L rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
grep -B2 -A6 "Error: Race\|Invalid" /tmp/rc.log /tmp/mc.log | head -60 > $OUT/sanitizer_head.log
cat $OUT/info.txt $OUT/table.txt
