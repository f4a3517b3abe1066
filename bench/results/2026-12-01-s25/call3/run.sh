#!/bin/bash
# Session 25 call 3: main b7cac07 (NB: the consumers carry the ring position, the weight lane too at BN = 128)
# against main 00ce4a5 (M): tests and sanitizers on NB, three timing rounds, then the C = 128 burst
# against torch's bf16 matmul (session 24 call 5's script, NB's bench).
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
for R in (196, 256, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
for v in NB; do
  timeout 150 $X/$v/test_sparse_conv > $OUT/test_$v.txt 2>&1; echo "test $v rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test_$v.txt | tr "\n" " ")" >> $OUT/info.txt
  grep -E "FAILED|Failure" -A3 $OUT/test_$v.txt | head -20 >> $OUT/info.txt
done
run() { # variant R C CO only
  timeout 90 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --co $4 --out /tmp/o --mma-only 1 --samples 4096 --reps 10 --only $5 > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$? $(tail -2 /tmp/b.err)" >> $OUT/table.txt
  cat /tmp/b.json >> $OUT/bench.jsonl
  echo "$1 R=$2 $3->$4 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(grep -o '"wgmma[a-z0-9_]*_ms": [0-9.]*' /tmp/b.json | tr '\n' ' ') $(md5sum /tmp/o.out 2>/dev/null | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2 3; do
  for v in M NB; do run $v 1024 128 128 wgmma_halo_pipe128; run $v 1024 64 64 wgmma_halo_pipe; done
  for v in M NB; do run $v 512 128 128 wgmma_halo_pipe128; run $v 512 64 64 wgmma_halo_pipe; run $v 256 128 128 none; run $v 196 128 128 none; done
  for v in M NB; do run $v 1024 128 64 wgmma_halo_pipe; done
done
F="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.*Rule*"
timeout 100 compute-sanitizer --tool memcheck $X/NB/test_sparse_conv --gtest_filter="$F" > /tmp/mc.log 2>&1; echo "memcheck NB rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
timeout 160 compute-sanitizer --tool racecheck $X/NB/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/rc.log 2>&1; echo "racecheck NB rc=$? $(grep 'RACECHECK SUMMARY' /tmp/rc.log | tail -1)" >> $OUT/info.txt
timeout 60 compute-sanitizer --tool synccheck $X/NB/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > /tmp/sc.log 2>&1; echo "synccheck NB rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1)" >> $OUT/info.txt
grep -B2 -A6 "Error: Race\|Invalid" /tmp/rc.log /tmp/mc.log | head -30 > $OUT/sanitizer_head.log
cp $X/NB/spconv $H/spconv_m
OUT=$OUT bash $H/burst.sh > /dev/null 2>&1
cat $OUT/info.txt; sort -s -k2,3 $OUT/table.txt; cat $OUT/burst_table.txt
